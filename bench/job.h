// How a multi-rank benchmark ends: a failure stops the whole job (a rank that stopped alone would
// leave the others waiting in a collective), success shuts the runtime and MPI down.
#ifndef OVERLAP_BENCH_JOB_H_
#define OVERLAP_BENCH_JOB_H_

#include <string>

#include "absl/status/status.h"

namespace overlap::bench {

// Prints "<program>: rank R: <message>" to stderr and aborts every rank.
[[noreturn]] void AbortJob(const char* program, const std::string& message);

// AbortJob with the status's text unless it is OK.
void CheckOrAbort(const char* program, const absl::Status& status);

// Shuts the runtime down (aborting the job if that fails), finalizes MPI unless something already
// did, and returns `exit_code` for main to return.
int FinishJob(const char* program, int exit_code);

}  // namespace overlap::bench

#endif  // OVERLAP_BENCH_JOB_H_
