#include "src/endpoint/rank_link.h"

#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <utility>

#include "src/control/group_security.h"
#include "src/control/messages.h"

namespace weightcast {
namespace {

// Why a tcp:// endpoint cannot be reached as far as name resolution tells (empty: it
// resolves, or it is not tcp).
std::string resolution_problem(const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return "";
  std::string host = endpoint.substr(kTcp.size());
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) host.resize(colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") return "";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc == 0) return "";
  return "host '" + host + "' does not resolve: " + ::gai_strerror(rc);
}

}  // namespace

RankLink::RankLink(RankLinkOptions options, std::string endpoint,
                   std::unique_ptr<ControlClient> client, Handler handler, HeldVersion held)
    : options_(std::move(options)),
      client_(std::move(client)),
      handler_(std::move(handler)),
      held_(std::move(held)),
      endpoint_(std::move(endpoint)),
      waiting_(options_.log),
      refusal_log_(options_.log) {
  if (options_.protocol_min == 0) options_.protocol_min = kProtocolMin;
  if (options_.protocol_max == 0) options_.protocol_max = kProtocolMax;
  protocol_ = options_.protocol_max;
  std::random_device random;
  nonce_ = (uint64_t{random()} << 32) | random();
}

Result<std::unique_ptr<RankLink>> RankLink::start(const proto::GroupConfig& config,
                                                  RankLinkOptions options, Handler handler,
                                                  HeldVersion held) {
  ASSIGN_OR_RETURN(CurveClientOptions curve, rank_curve(config, options.rank));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ControlClient> client,
      ControlClient::connect(config.coordinator_endpoint(), curve, MessageLimits{}, options.log));
  std::unique_ptr<RankLink> link(new RankLink(std::move(options), config.coordinator_endpoint(),
                                              std::move(client), std::move(handler),
                                              std::move(held)));
  link->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // -1: the loop polls instead
  link->thread_ = std::thread([l = link.get()] { l->loop(); });
  return link;
}

RankLink::~RankLink() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

proto::Envelope RankLink::envelope() const {
  proto::Envelope e;
  e.set_protocol(protocol_);
  e.set_rank(options_.rank);
  return e;
}

void RankLink::send(proto::Envelope message) {
  message.set_rank(options_.rank);
  {
    std::lock_guard<std::mutex> lock(mu_);
    outbox_.push_back(std::move(message));
  }
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

void RankLink::say_hello() {
  last_hello_ = std::chrono::steady_clock::now();
  proto::Envelope e = envelope();
  e.set_protocol(options_.protocol_max);
  proto::Hello& h = *e.mutable_hello();
  h.set_protocol_min(options_.protocol_min);
  h.set_protocol_max(options_.protocol_max);
  h.set_role(options_.role);
  h.set_rank(options_.rank);
  if (auto held = held_ ? held_() : std::nullopt) {
    h.set_holds_version(true);
    h.set_held_version(*held);
  }
  for (const auto& t : options_.transports) h.add_transports(t);
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) h.set_host(host);
  h.set_pid(static_cast<uint32_t>(getpid()));
  h.set_nonce(nonce_);
  if (options_.held_journal) h.set_held_journal_id(options_.held_journal());
  (void)client_->send(e);
}

void RankLink::handle(const proto::Envelope& m) {
  if (m.has_welcome()) {
    std::lock_guard<std::mutex> lock(mu_);
    protocol_ = m.welcome().protocol();
    welcome_ = m.welcome();
    ++welcome_count_;
    cv_.notify_all();
  } else if (m.has_refuse()) {
    if (m.refuse().fatal()) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ =
          "coordinator refused rank " + std::to_string(options_.rank) + ": " + m.refuse().reason();
      cv_.notify_all();
      return;
    }
    if (leaving_) return;
    last_refusal_ = m.refuse().reason();
    refusal_log_.log("refused", "rank link: " + m.refuse().reason(),
                     "rank link: refused {} more times by the coordinator", m.refuse().reason());
    // Every message queued for the old coordinator is refused at once: one Hello answers all.
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      welcome_.reset();
    }
    if (now - last_hello_ >= std::chrono::milliseconds(200)) {
      say_hello();
    }
    return;
  }
  if (handler_) handler_(m);
}

void RankLink::loop() {
  using Clock = std::chrono::steady_clock;
  say_hello();
  Clock::time_point last_beat = Clock::now();
  while (!stop_.load()) {
    std::deque<proto::Envelope> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fatal_) break;
      out.swap(outbox_);
    }
    for (auto& m : out) {
      m.set_protocol(protocol_);
      (void)client_->send(m);
    }
    auto incoming = client_->receive(std::chrono::milliseconds(20), wake_fd_);
    if (wake_fd_ >= 0) {
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof(count));  // the outbox is sent at the loop's top
    }
    if (incoming.ok() && incoming->has_value()) handle(**incoming);
    if (auto failure = client_->auth_failure()) {
      std::lock_guard<std::mutex> lock(mu_);
      fatal_ = *failure;
      cv_.notify_all();
      break;
    }
    const auto now = Clock::now();
    bool welcomed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      welcomed = welcome_.has_value();
    }
    if (leaving_) continue;
    if (welcomed) {
      waiting_.restart();
      last_refusal_.clear();
    } else {
      waiting_.report([&] {
        std::string why = last_refusal_.empty() ? resolution_problem(endpoint_) : "";
        if (why.empty()) why = last_refusal_.empty() ? "no answer" : "refused: " + last_refusal_;
        return "rank " + std::to_string(options_.rank) + ": no Welcome from the coordinator at " +
               endpoint_ + " yet (" + why + "); still trying";
      });
    }
    if (!welcomed && now - last_hello_ >= options_.hello_retry) say_hello();
    if (welcomed && now - last_beat >= options_.heartbeat) {
      proto::Envelope e = envelope();
      proto::Heartbeat& hb = *e.mutable_heartbeat();
      hb.set_rank(options_.rank);
      if (auto held = held_ ? held_() : std::nullopt) {
        hb.set_holds_version(true);
        hb.set_held_version(*held);
      }
      (void)client_->send(e);
      last_beat = now;
    }
  }
}

Result<proto::Welcome> RankLink::wait_welcome(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return welcome_.has_value() || fatal_; })) {
    return deadline_exceeded("rank " + std::to_string(options_.rank) +
                             ": no Welcome from the coordinator before the deadline");
  }
  if (fatal_) return failed_precondition(*fatal_);
  return *welcome_;
}

std::optional<proto::Welcome> RankLink::welcome() const {
  std::lock_guard<std::mutex> lock(mu_);
  return welcome_;
}

std::optional<std::string> RankLink::fatal_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

void RankLink::stop(const std::string& reason, std::chrono::milliseconds flush) {
  if (!thread_.joinable()) return;
  if (!reason.empty()) {
    leaving_ = true;
    proto::Envelope e = envelope();
    e.mutable_leave()->set_rank(options_.rank);
    e.mutable_leave()->set_reason(reason);
    send(std::move(e));
    const auto until = std::chrono::steady_clock::now() + flush;
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (outbox_.empty() || fatal_) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // The socket closes without linger: give ZeroMQ's I/O thread a moment to put it on the wire.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop_ = true;
  thread_.join();
}

}  // namespace weightcast
