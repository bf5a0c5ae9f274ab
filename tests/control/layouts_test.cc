// Engine layouts in the group config (src/control/layouts.h): the section and the ranks that
// name a layout, one test per refusal, and the slices the rules cut.
#include "src/control/layouts.h"

#include <gtest/gtest.h>

#include "tests/control/group_config_test_util.h"

namespace weightcast {
namespace {

using group_config_test::kMinimal;
using group_config_test::parse;
using group_config_test::with;

const std::string kLayouts = R"(layouts:
  - name: tp2
    parts: 2
    rules:
      - {match: '.*\.(q|gate)_proj\.weight', dim: 0}
      - {match: '.*norm.*', whole: true}
      - {match: '.*\.o_proj\.weight', dim: 1}
  - {name: single, parts: 1}
)";

// kMinimal's subscriber rank 2 and a second one, rank 3, as the two parts of replica e0.
std::string with_engine(const std::string& layouts = kLayouts,
                        const std::string& r2 = "layout: tp2, part: 0, replica: e0",
                        const std::string& r3 = "layout: tp2, part: 1, replica: e0") {
  return with(kMinimal, "  - {rank: 2, role: subscriber}\n",
              "  - {rank: 2, role: subscriber, " + r2 + "}\n  - {rank: 3, role: subscriber, " + r3 +
                  "}\n") +
         layouts;
}

void expect_refused(const std::string& text, const std::string& needle) {
  auto r = parse(text);
  ASSERT_FALSE(r.ok()) << "accepted:\n" << text;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("test.yaml"), std::string::npos) << r.status().message();
}

TEST(Layouts, SectionAndRanksParse) {
  auto r = parse(with_engine());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->layouts_size(), 2);
  EXPECT_EQ(r->layouts(0).name(), "tp2");
  EXPECT_EQ(r->layouts(0).parts(), 2u);
  ASSERT_EQ(r->layouts(0).rules_size(), 3);
  EXPECT_EQ(r->layouts(0).rules(0).dim(), 0u);
  EXPECT_TRUE(r->layouts(0).rules(1).whole());
  EXPECT_EQ(r->layouts(0).rules(2).dim(), 1u);
  EXPECT_EQ(r->layouts(1).rules_size(), 0);
  EXPECT_EQ(r->ranks(3).layout(), "tp2");
  EXPECT_EQ(r->ranks(3).part(), 1u);
  EXPECT_EQ(r->ranks(3).replica(), "e0");
  EXPECT_TRUE(parse(kMinimal).ok());
}

TEST(Layouts, EachMalformedCaseIsRefusedNamingTheField) {
  expect_refused(with_engine(with(kLayouts, "parts: 2", "parts: 0")), "layouts[0].parts");
  expect_refused(with_engine(kLayouts + "  - {name: tp2, parts: 4}\n"),
                 "layouts[2].name: layout 'tp2' is declared twice");
  expect_refused(with_engine(with(kLayouts, "dim: 0}", "dim: 0, whole: true}")),
                 "layouts[0].rules[0]: needs either dim");
  expect_refused(with_engine(with(kLayouts, "{match: '.*norm.*', whole: true}", "{match: x}")),
                 "layouts[0].rules[1]: needs either dim");
  expect_refused(with_engine(with(kLayouts, "'.*norm.*'", "'(unclosed'")),
                 "layouts[0].rules[1].match: '(unclosed' is not a valid regex");
  expect_refused(with_engine(with(kLayouts, "dim: 1}", "dim: 1, split: 2}")),
                 "layouts[0].rules[2]");
  expect_refused(with_engine(kLayouts, "layout: tp4, part: 0, replica: e0"),
                 "ranks[2].layout: 'tp4' is not one of the layouts");
  expect_refused(with_engine(kLayouts, "layout: tp2, part: 2, replica: e0"),
                 "ranks[2].part: 2 is not a part of layout 'tp2' (it has 2)");
  expect_refused(with_engine(kLayouts, "layout: tp2, part: 1, replica: e0"),
                 "replica 'e0' of layout 'tp2' has part 1 twice (ranks 2 and 3)");
  expect_refused(with_engine(kLayouts, "layout: tp2, part: 0, replica: e0",
                             "layout: tp2, part: 1, replica: e1"),
                 "replica 'e0' of layout 'tp2' has no rank for part 1 of 2");
  expect_refused(with_engine(kLayouts, "part: 1", "layout: tp2, part: 1"),
                 "ranks[2]: part and replica need a layout");
  expect_refused(with(with_engine(), "{rank: 1, role: publisher, host: 127.0.0.1}",
                      "{rank: 1, role: publisher, host: 127.0.0.1, layout: single}"),
                 "ranks[1].layout: only subscriber ranks hold a layout's slices");
}

TEST(Layouts, RulesCutTheSlicesOfEachPart) {
  auto config = parse(with_engine());
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto rules = LayoutRules::compile(*config);
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  const std::vector<int64_t> shape = {5, 6};
  const auto slice = [&](const std::string& tensor, uint32_t part) {
    auto s = rules->slice("tp2", tensor, shape, part);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? describe_slice(*s) : std::string();
  };
  EXPECT_EQ(slice("l.0.self_attn.q_proj.weight", 0), "[0:3, 0:6]");
  EXPECT_EQ(slice("l.0.self_attn.q_proj.weight", 1), "[3:5, 0:6]");
  EXPECT_EQ(slice("l.0.self_attn.o_proj.weight", 1), "[0:5, 3:6]");
  EXPECT_EQ(slice("l.0.input_layernorm.weight", 1), "[0:5, 0:6]");
  EXPECT_EQ(slice("embed_tokens.weight", 0), "[0:5, 0:6]");  // no rule: whole
  // Every distinct slice but the whole tensor, for the manifest's checksums.
  auto q = rules->declared_slices("l.0.self_attn.q_proj.weight", shape);
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->size(), 2u);
  EXPECT_EQ(describe_slice((*q)[1]), "[3:5, 0:6]");
  auto norm = rules->declared_slices("l.0.input_layernorm.weight", shape);
  ASSERT_TRUE(norm.ok());
  EXPECT_TRUE(norm->empty());
  // A rule that splits a dimension the tensor lacks names both.
  auto bias = rules->slice("tp2", "l.0.self_attn.o_proj.weight", {6}, 0);
  ASSERT_FALSE(bias.ok());
  EXPECT_NE(bias.status().message().find(
                "tensor 'l.0.self_attn.o_proj.weight' has 1 dimensions; rule 2 of layout 'tp2' "
                "splits dimension 1"),
            std::string::npos)
      << bias.status().message();
  EXPECT_FALSE(rules->slice("tp8", "x", shape, 0).ok());
  EXPECT_FALSE(rules->slice("tp2", "x", shape, 2).ok());
}

}  // namespace
}  // namespace weightcast
