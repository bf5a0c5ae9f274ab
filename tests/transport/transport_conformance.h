// The contract of transport.h, written once and instantiated per backend
// (transport_conformance_test.cc; INSTANTIATE_TEST_SUITE_P in fs_transport_test.cc; ucx and
// nccl add theirs). A backend the host cannot run makes every test skip with the reason.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "transport/transport.h"

namespace weightcast::testing {

// One publisher and one subscriber connected through the backend under test, made by its
// factories; when a factory refuses because the backend cannot run on this host, both are null
// and `cannot_run` says why (every test then skips with it).
struct TransportPeers {
  std::unique_ptr<PartPublisher> publisher;
  std::unique_ptr<PartReader> subscriber;
  std::string cannot_run;
  // Flips one byte of a published part where the subscriber reads it; null when the backend
  // cannot (the corruption test then skips).
  std::function<void(uint64_t version, const std::string& part)> corrupt;
  // Makes the publisher's next I/O fail as a broken connection would; null when it cannot.
  std::function<void()> break_publisher;
};

struct TransportBackend {
  std::string name;
  std::function<TransportPeers()> connect;
};

// What gtest prints for a parameter (the backend's name, not its bytes).
inline void PrintTo(const TransportBackend& backend, std::ostream* os) {
  *os << backend.name;
}

class TransportConformance : public ::testing::TestWithParam<TransportBackend> {
 protected:
  void SetUp() override;
  TransportPeers peers_;
};

}  // namespace weightcast::testing
