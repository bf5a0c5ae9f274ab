// Everything a C++ trainer or engine needs from weightcast (find_package(weightcast), link
// weightcast::weightcast). The public API lives in namespace weightcast::api.
#pragma once

#include "weightcast/adapter.h"
#include "weightcast/deadline.h"
#include "weightcast/journal.h"
#include "weightcast/publisher.h"
#include "weightcast/shard_publisher.h"
#include "weightcast/status.h"
#include "weightcast/step.h"
#include "weightcast/subscriber.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

// "0.1.0 (abc1234)": the library's version and revision.
const char* version_string();

// Whether this build can carry versions over UCX (a group config's `ucx` transport); a build
// without it reads every version from the journal.
bool ucx_built();

}  // namespace weightcast::api
