// The ucx live path (src/endpoint/live_path.h): besides writing each version to the journal,
// the publisher serves the version's delta from its own memory over UCX, and a live
// subscriber reads it with one-sided gets instead of reading the journal's files.
//
// What is served: a version's delta (for an anchor, the delta it carries), as parts of the
// UCX transport (transport/ucx/ucx_transport.h) named "MANIFEST" (the framed delta manifest
// of transport/fs/journal_files.h) and the manifest's part files. The descriptor is the UCX
// version blob that says where they are (transport/ucx/ucx_version_blob.h: the worker address,
// the remote keys), so no store is shared between hosts. The server keeps the last
// max_in_flight + 2 served versions readable: serving in place (ucx.publisher_memory) it holds
// those deltas' buffers, registered where they are; serving copies, the transport owns them.
//
// Every failure (publisher gone, version retired, corrupt part, deadline) is an error the
// subscriber nacks; the group's recovery then goes through the journal. After a connection
// error the fetcher rebuilds its UCX objects on the next fetch (a restarted publisher has a
// new worker address).
#pragma once

#include <memory>

#include "src/endpoint/live_path.h"

namespace weightcast {

// True when this build has the UCX backend.
bool ucx_built();

// The path named "ucx": viable in builds with UCX; its sides fail to start (saying why) when
// UCX finds no transport for the group's ucx.tls.
std::shared_ptr<const LivePath> ucx_live_path();

}  // namespace weightcast
