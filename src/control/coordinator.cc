#include "src/control/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "src/control/group_security.h"
#include "src/control/messages.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"
#include "transport/fs/step_commit.h"

namespace weightcast {

Coordinator::Coordinator(proto::GroupConfig config, CoordinatorOptions options,
                         std::unique_ptr<ControlServer> server)
    : config_(std::move(config)),
      options_(std::move(options)),
      server_(std::move(server)),
      state_(CoordinatorSettings::from_config(config_)),
      journal_log_(options_.log),
      event_log_(options_.log) {}

Result<std::unique_ptr<Coordinator>> Coordinator::start(const proto::GroupConfig& config,
                                                        CoordinatorOptions options) {
  auto curve_or = coordinator_curve(config);
  if (!curve_or.ok()) {
    if (options.listen_fd >= 0) ::close(options.listen_fd);  // taken either way (coordinator.h)
    return curve_or.status();
  }
  const CurveServerOptions curve = std::move(curve_or).value();
  const std::string bind =
      config.coordinator_bind().empty() ? config.coordinator_endpoint() : config.coordinator_bind();
  ASSIGN_OR_RETURN(
      std::unique_ptr<ControlServer> server,
      ControlServer::bind(bind, curve, MessageLimits{}, options.log, options.listen_fd));
  if (std::error_code ec; !config.journal_root().empty() &&
                          std::filesystem::exists(config.journal_root(), ec) &&
                          !std::filesystem::is_directory(config.journal_root(), ec)) {
    return invalid_argument("journal.root '" + config.journal_root() +
                            "' of the group config is not a directory");
  }
  std::unique_ptr<Coordinator> c(new Coordinator(config, std::move(options), std::move(server)));
  RETURN_IF_ERROR(c->poll_journal());
  c->log_events();
  return c;
}

Status Coordinator::poll_journal() {
  last_poll_ = CoordinatorClock::now();
  const JournalLayout layout(config_.journal_root());
  auto read = read_journal_head(layout);
  if (!read.ok()) {
    // A corrupt or missing HEAD beside committed steps: reported (at a bounded rate) and
    // retried; the group stays on what it has until the journal is repaired.
    journal_log_.log(
        "head", "coordinator: journal '" + config_.journal_root() + "': " + read.status().message(),
        "coordinator: the journal's HEAD was unreadable {} more times", read.status().message());
    return ok_status();
  }
  if (!*read) return ok_status();
  const proto::JournalHead& head = **read;
  state_.note_anchor(head.anchor_version());
  const std::string& known_id = state_.journal_id();
  const bool other_journal =
      !known_id.empty() && !head.journal_id().empty() && head.journal_id() != known_id;
  const bool went_back =
      state_.head() && head.version() < *state_.head() &&
      (head.journal_id().empty() || head.journal_id() == known_id || known_id.empty());
  if (!other_journal && !went_back && state_.head() && *state_.head() >= head.version()) {
    return ok_status();
  }
  auto manifest = read_manifest_file(layout.manifest(head.version()));
  if (!manifest.ok()) {
    journal_log_.log("manifest", "coordinator: " + manifest.status().message(),
                     "coordinator: the head's manifest was unreadable {} more times",
                     manifest.status().message());
    return ok_status();
  }
  std::vector<proto::TensorChecksum> checksums;
  for (const auto& t : manifest->tensors()) {
    proto::TensorChecksum c;
    c.set_name(t.name());
    c.set_checksum(t.checksum());
    checksums.push_back(std::move(c));
  }
  const auto now = CoordinatorClock::now();
  if (other_journal || went_back) {
    const std::string why =
        other_journal
            ? "journal '" + config_.journal_root() + "' was replaced (id " + known_id + " -> " +
                  head.journal_id() + ", HEAD at version " + std::to_string(head.version()) + ")"
            : "HEAD of journal '" + config_.journal_root() + "' went back from version " +
                  std::to_string(*state_.head()) + " to " + std::to_string(head.version());
    if (options_.log)
      options_.log("coordinator: " + why + ": every subscriber reloads from an anchor");
    unoffered_head_ = head.version();
    unoffered_since_ = now;
    return send_all(state_.on_journal_replaced(head.version(), head.anchor_version(),
                                               std::move(checksums), head.journal_id(), why, now));
  }
  if (!state_.head()) {
    // Start (or restart): the head is published; who holds it comes with the Hellos.
    state_.restore_head(head.version(), head.anchor_version(), std::move(checksums), now,
                        head.journal_id());
    if (options_.log) {
      options_.log("coordinator: journal " + config_.journal_root() + " at version " +
                   std::to_string(head.version()) + " (anchor " +
                   std::to_string(head.anchor_version()) + ")");
    }
    return ok_status();
  }
  // Published but not offered: normally the publisher's offer is on its way; after a grace
  // period (its publisher died between HEAD and the offer) offer it from the manifest.
  if (unoffered_head_ != head.version()) {
    unoffered_head_ = head.version();
    unoffered_since_ = now;
    return ok_status();
  }
  if (now - unoffered_since_ < options_.offer_grace) return ok_status();
  // Every version published since the last one offered, in order: a publisher cut off from
  // the coordinator may have published several (up to max_in_flight) into the journal, and
  // each must be committed or refused on its own, not skipped by the newest.
  RETURN_IF_ERROR(offer_versions_before(head.version(), head.journal_id()));
  return offer_from_manifest(head.version(), *manifest, head.journal_id());
}

Status Coordinator::offer_versions_before(uint64_t version, const std::string& journal_id) {
  if (!state_.head() || version <= *state_.head() + 1) return ok_status();
  // A publisher publishes at most max_in_flight versions ahead of the last commit; a wider
  // gap is not one this rule fills (the subscribers' catch-up still crosses it).
  const uint64_t gap = version - *state_.head() - 1;
  if (gap > std::max<uint64_t>(config_.max_in_flight(), 1)) return ok_status();
  const JournalLayout layout(config_.journal_root());
  for (uint64_t v = *state_.head() + 1; v < version; ++v) {
    auto manifest = read_manifest_file(layout.manifest(v));
    if (!manifest.ok()) continue;  // pruned since, or never written: nothing to offer
    RETURN_IF_ERROR(offer_from_manifest(v, *manifest, journal_id));
  }
  return ok_status();
}

Status Coordinator::offer_from_manifest(uint64_t version, const proto::StepManifest& manifest,
                                        const std::string& journal_id) {
  if (options_.log) {
    options_.log("coordinator: version " + std::to_string(version) +
                 " is in the journal but was never offered; offering it from its manifest");
  }
  proto::Offer offer;
  offer.set_version(version);
  offer.set_anchor(manifest.kind() == proto::STEP_ANCHOR);
  for (const auto& t : manifest.tensors()) {
    proto::TensorChecksum* c = offer.add_checksums();
    c->set_name(t.name());
    c->set_checksum(t.checksum());
  }
  offer.set_journal_id(journal_id);
  return send_all(state_.on_offer(offer, CoordinatorClock::now()));
}

Status Coordinator::send_all(std::vector<OutgoingMessage> out) {
  for (auto& o : out) RETURN_IF_ERROR(server_->send(o.peer, o.message));
  log_events();
  return ok_status();
}

void Coordinator::log_events() {
  for (const auto& e : state_.take_events()) {
    if (!options_.log || e.kind == CoordinatorEvent::Kind::kAcked) continue;
    std::string line = "coordinator: " + std::string(event_kind_name(e.kind));
    if (e.rank) line += " rank " + std::to_string(e.rank);
    if (e.version || e.kind == CoordinatorEvent::Kind::kCommitted) {
      line += " v" + std::to_string(e.version);
    }
    if (!e.detail.empty()) line += ": " + e.detail;
    // Refusals, moves to catch-up and ignored messages repeat as long as their cause lasts.
    using K = CoordinatorEvent::Kind;
    if (e.kind == K::kRefused || e.kind == K::kMovedToCatchUp || e.kind == K::kIgnored) {
      const std::string kind(event_kind_name(e.kind));
      event_log_.log(kind + std::to_string(e.rank), line,
                     "coordinator: {} more '" + kind + "' events of rank " + std::to_string(e.rank),
                     e.detail);
      continue;
    }
    options_.log(line);
  }
}

Status Coordinator::step(std::chrono::milliseconds wait) {
  ASSIGN_OR_RETURN(auto incoming, server_->receive(wait));
  if (incoming && !hello_key_matches(*incoming)) {
    proto::Envelope refuse;
    refuse.set_protocol(kProtocolMax);
    refuse.set_from_coordinator(true);
    refuse.mutable_refuse()->set_fatal(true);
    refuse.mutable_refuse()->set_reason(
        "rank " + std::to_string(incoming->message.hello().rank()) +
        " must connect with its own CURVE key (ranks[].key_file of the group config)");
    if (options_.log) options_.log("coordinator: " + refuse.refuse().reason() + "; refused");
    RETURN_IF_ERROR(server_->send(incoming->peer, refuse));
    incoming.reset();
  }
  if (incoming) {
    // Offers are contiguous: versions a publisher published while its offers could not reach
    // this coordinator (a cut link) are offered from the journal before the newer one.
    if (incoming->message.has_offer()) {
      RETURN_IF_ERROR(offer_versions_before(incoming->message.offer().version(),
                                            incoming->message.offer().journal_id()));
    }
    RETURN_IF_ERROR(
        send_all(state_.on_message(incoming->peer, incoming->message, CoordinatorClock::now())));
  }
  const auto now = CoordinatorClock::now();
  if (now - last_tick_ >= options_.tick) {
    last_tick_ = now;
    RETURN_IF_ERROR(send_all(state_.on_tick(now)));
    event_log_.poll();
    journal_log_.poll();
  }
  if (now - last_poll_ >= options_.journal_poll) RETURN_IF_ERROR(poll_journal());
  return ok_status();
}

bool Coordinator::hello_key_matches(const IncomingMessage& incoming) const {
  // Any authorized key may ask for status; a rank's Hello must carry that rank's key, so one
  // rank's (or an observer's) key cannot impersonate another rank.
  if (!config_.curve().enabled() || !incoming.message.has_hello()) return true;
  const proto::Hello& hello = incoming.message.hello();
  if (hello.role() == proto::ROLE_OBSERVER) return true;
  for (const auto& r : config_.ranks()) {
    if (r.rank() == hello.rank()) return r.public_key() == incoming.peer_key;
  }
  return true;  // an unknown rank is refused by the state machine, naming the group
}

Status Coordinator::run(const std::atomic<bool>& stop) {
  while (!stop.load()) RETURN_IF_ERROR(step(options_.tick));
  return ok_status();
}

}  // namespace weightcast
