// CURVE key files: generate -> write -> read round trips, the file's mode, refusing to
// overwrite, and malformed files whose errors name the path (and the line at fault).
#include "src/control/curve_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace weightcast {
namespace {

// ZeroMQ's CURVE specification (RFC 26) test vectors: two matching pairs.
const CurveKeyPair kServer{"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID",
                           "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"};
const CurveKeyPair kClient{"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7",
                           "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"};

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "curve_keys.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class CurveKeys : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!zmq_has("curve")) GTEST_SKIP() << "libzmq built without CURVE";
    ASSERT_FALSE(dir_.path().empty());
  }
  std::string write_text(const std::string& name, const std::string& text) {
    const std::string path = dir_.file(name);
    std::ofstream(path) << text;
    return path;
  }
  // Reading `text` fails, naming the path and containing `needle`.
  ::testing::AssertionResult read_fails(const std::string& text, const std::string& needle) {
    const std::string path = write_text("bad.key", text);
    auto r = read_curve_key_file(path);
    if (r.ok()) return ::testing::AssertionFailure() << "accepted:\n" << text;
    const std::string& msg = r.status().message();
    if (msg.find(path) == std::string::npos || msg.find(needle) == std::string::npos) {
      return ::testing::AssertionFailure() << "path or '" << needle << "' not in: " << msg;
    }
    return ::testing::AssertionSuccess();
  }
  static std::string file_text(const CurveKeyPair& p) {
    return "public-key = " + p.public_z85 + "\nsecret-key = " + p.secret_z85 + "\n";
  }
  TempDir dir_;
};

TEST(CurveKeysZ85, AcceptsKeysAndRejectsOthers) {
  EXPECT_TRUE(is_z85_key(kServer.public_z85));
  EXPECT_TRUE(is_z85_key(kClient.secret_z85));
  EXPECT_FALSE(is_z85_key(""));
  EXPECT_FALSE(is_z85_key(kServer.public_z85.substr(1)));
  EXPECT_FALSE(is_z85_key(kServer.public_z85 + "a"));
  EXPECT_FALSE(is_z85_key(std::string(39, 'a') + "'"));                   // not in the alphabet
  EXPECT_FALSE(is_z85_key(std::string(39, 'a') + std::string(1, '\0')));  // embedded NUL
  EXPECT_FALSE(is_z85_key(std::string(40, '#')));                         // groups above 2^32
}

TEST_F(CurveKeys, GenerateWriteReadRoundTrip) {
  auto pair = generate_curve_key_pair();
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  EXPECT_TRUE(is_z85_key(pair->public_z85));
  EXPECT_TRUE(is_z85_key(pair->secret_z85));
  auto other = generate_curve_key_pair();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->secret_z85, pair->secret_z85);

  const std::string path = dir_.file("rank0.key");
  ASSERT_TRUE(write_curve_key_file(path, *pair).ok());
  auto back = read_curve_key_file(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->public_z85, pair->public_z85);
  EXPECT_EQ(back->secret_z85, pair->secret_z85);
}

TEST_F(CurveKeys, FileIsPrivateAndNoTempFileRemains) {
  const std::string path = dir_.file("k.key");
  ASSERT_TRUE(write_curve_key_file(path, kServer).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

// Too-open key files are used with a warning (Kubernetes mounts secrets 0644), never refused.
TEST_F(CurveKeys, KeyFileReadableByOthersIsUsedWithAWarning) {
  const std::string path = dir_.file("open.key");
  ASSERT_TRUE(write_curve_key_file(path, kServer).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  std::vector<std::string> warnings;
  auto r = read_curve_key_file(path, [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->secret_z85, kServer.secret_z85);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "warning: CURVE key file '" + path +
                             "' has mode 0644: its secret key is accessible to group or "
                             "others; run: chmod 600 " +
                             path);

  // Group access alone is enough; the warning follows a symlink to the file it names.
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  const std::string link = dir_.file("link.key");
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  warnings.clear();
  ASSERT_TRUE(read_curve_key_file(link, [&](const std::string& w) { warnings.push_back(w); }).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'" + link + "' has mode 0640"), std::string::npos) << warnings[0];
}

TEST_F(CurveKeys, PrivateKeyFileHasNoWarning) {
  const std::string path = dir_.file("private.key");
  ASSERT_TRUE(write_curve_key_file(path, kServer).ok());
  for (const mode_t mode : {0600, 0400}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    std::vector<std::string> warnings;
    ASSERT_TRUE(
        read_curve_key_file(path, [&](const std::string& w) { warnings.push_back(w); }).ok());
    EXPECT_TRUE(warnings.empty()) << warnings[0];
  }
}

TEST(CurveKeyModeWarning, NamesModeAndFixOnlyForGroupOrOtherAccess) {
  EXPECT_EQ(key_file_mode_warning("k", S_IFREG | 0600), "");
  EXPECT_EQ(key_file_mode_warning("k", S_IFREG | 0700), "");
  EXPECT_NE(key_file_mode_warning("k", S_IFREG | 0604).find("mode 0604"), std::string::npos);
  EXPECT_NE(key_file_mode_warning("k", S_IFREG | 0620).find("chmod 600 k"), std::string::npos);
}

TEST_F(CurveKeys, RefusesToOverwriteUnlessAsked) {
  const std::string path = dir_.file("k.key");
  ASSERT_TRUE(write_curve_key_file(path, kServer).ok());
  const Status again = write_curve_key_file(path, kClient);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find(path), std::string::npos) << again.message();
  EXPECT_EQ(read_curve_key_file(path)->public_z85, kServer.public_z85);

  ASSERT_TRUE(write_curve_key_file(path, kClient, /*overwrite=*/true).ok());
  EXPECT_EQ(read_curve_key_file(path)->public_z85, kClient.public_z85);
}

TEST_F(CurveKeys, WriteRefusesAMismatchedPair) {
  const std::string path = dir_.file("k.key");
  const Status st = write_curve_key_file(path, {kServer.public_z85, kClient.secret_z85});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(CurveKeys, WriteIntoMissingDirectoryNamesIt) {
  const std::string path = dir_.file("no/such/k.key");
  const Status st = write_curve_key_file(path, kServer);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find(dir_.file("no/such")), std::string::npos) << st.message();
}

TEST_F(CurveKeys, ReadsCommentsBlankLinesAndCrlf) {
  const std::string path =
      write_text("k.key", "# made by hand\r\n\r\npublic-key = " + kClient.public_z85 +
                              "\r\n#\r\nsecret-key=" + kClient.secret_z85 + "\r\n\r\n");
  auto r = read_curve_key_file(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->secret_z85, kClient.secret_z85);
}

TEST_F(CurveKeys, MissingFileNamesThePath) {
  const std::string path = dir_.file("absent.key");
  auto r = read_curve_key_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos);
}

TEST_F(CurveKeys, EmptyFileLacksThePublicKey) {
  EXPECT_TRUE(read_fails("# only a comment\n", "missing the public-key line"));
}

TEST_F(CurveKeys, MissingSecretLine) {
  EXPECT_TRUE(read_fails("public-key = " + kServer.public_z85 + "\n", "missing the secret-key"));
}

TEST_F(CurveKeys, LinesInTheWrongOrder) {
  EXPECT_TRUE(read_fails(
      "secret-key = " + kServer.secret_z85 + "\npublic-key = " + kServer.public_z85 + "\n",
      ":1: expected 'public-key"));
}

TEST_F(CurveKeys, LineWithoutEquals) {
  EXPECT_TRUE(read_fails("public-key " + kServer.public_z85 + "\n", ":1: expected"));
}

TEST_F(CurveKeys, BadZ85PublicKey) {
  std::string text = file_text(kServer);
  text[14] = '\'';
  EXPECT_TRUE(read_fails(text, ":1: public-key is not a 40-character Z85 key"));
}

TEST_F(CurveKeys, ShortSecretKey) {
  EXPECT_TRUE(read_fails("public-key = " + kServer.public_z85 + "\nsecret-key = abc\n",
                         ":2: secret-key is not"));
}

TEST_F(CurveKeys, PublicKeyNotMatchingSecret) {
  EXPECT_TRUE(read_fails(file_text({kServer.public_z85, kClient.secret_z85}), "does not match"));
}

TEST_F(CurveKeys, ExtraLineAfterTheSecret) {
  EXPECT_TRUE(read_fails(file_text(kServer) + "extra = 1\n", ":3: unexpected line"));
}

}  // namespace
}  // namespace weightcast
