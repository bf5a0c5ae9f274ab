// Making the UCX transport's halves in a test (transport/ucx/ucx_transport.h): a publisher
// whose factory refuses means UCX cannot run here, and the test skips saying why; a subscriber
// made beside a working publisher must be made.
#pragma once

#include <gtest/gtest.h>

#include "transport/ucx/ucx_transport.h"

// Declares `UcxPublisherTransport& name` made from `options`, or skips the test.
#define UCX_PUBLISHER_OR_SKIP(name, ...)                                         \
  auto name##_made = ::weightcast::UcxPublisherTransport::create(__VA_ARGS__);   \
  if (!name##_made.ok())                                                         \
    GTEST_SKIP() << "UCX cannot run here: " << name##_made.status().to_string(); \
  ::weightcast::UcxPublisherTransport& name = **name##_made

// Declares `UcxSubscriberTransport& name` made from `options`, or fails the test.
#define UCX_SUBSCRIBER(name, ...)                                               \
  auto name##_made = ::weightcast::UcxSubscriberTransport::create(__VA_ARGS__); \
  ASSERT_TRUE(name##_made.ok()) << name##_made.status().to_string();            \
  ::weightcast::UcxSubscriberTransport& name = **name##_made
