// Named points at which a fault test stops a process, so that it kills the process exactly
// there instead of hoping a timed kill lands inside a short window (tests/group: a publisher
// killed with a step staged, or renamed into place before HEAD names it; tests/service: the
// CLI killed before it writes a user's file).
//
// The environment variable WEIGHTCAST_STOP_AT=NAME:VERSION stops the process (SIGSTOP, which
// a parent sees with waitpid(WUNTRACED) or /proc/PID/stat) the first time it reaches point
// NAME for VERSION (NAME:* for any version); never again in that process once it was
// continued. Unset, a point costs one cached getenv. Production code never sets it;
// docs/DECISIONS.md "Fault points" lists the points.
#pragma once

#include <cstdint>

namespace weightcast {

// Stops the calling process when WEIGHTCAST_STOP_AT names this point and version.
void fault_point(const char* name, uint64_t version);

}  // namespace weightcast
