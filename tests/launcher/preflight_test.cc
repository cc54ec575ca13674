#include "launcher/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "launcher/parse_args.h"
#include "tests/launcher/test_util.h"

namespace overlap::launcher {
namespace {

using testing::Options;
using testing::TempDir;
using testing::WriteScript;

TEST_CASE("programs are found in PATH or by path, and must be executable", "[preflight]") {
  auto sh = ResolveProgram("sh", "/nonexistent:/bin:/usr/bin");
  REQUIRE(sh.ok());
  CHECK(*sh == "/bin/sh");
  CHECK(ResolveProgram("no-such-program-xyz", "/bin").status().message() ==
        "program 'no-such-program-xyz' is not found in PATH");
  CHECK(ResolveProgram("/no/such/prog", "").status().message() ==
        "program '/no/such/prog' does not exist");
  const std::string plain = WriteScript("not_executable.sh", "true", 0644);
  auto denied = ResolveProgram(plain, "");
  CHECK(denied.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(denied.status().message() == "program '" + plain + "' is not an executable file");
  CHECK(ResolveProgram("/tmp", "").status().message() ==
        "program '/tmp' is not an executable file");
}

TEST_CASE("a missing mpirun is caught before launching", "[preflight]") {
  absl::Status s = Preflight(Options({"-np", "1", "--mpirun", "/no/such/mpirun", "sh"}));
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() ==
        "mpirun '/no/such/mpirun' is not found or not executable; install Open MPI (openmpi-bin) "
        "or pass --mpirun PATH");
}

TEST_CASE("the timeline's directory must exist", "[preflight]") {
  absl::Status s = Preflight(Options({"-np", "1", "--timeline", "/no/such/dir/t.json", "sh"}));
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "--timeline /no/such/dir/t.json: directory /no/such/dir/ does not exist");
  CHECK(Preflight(Options({"-np", "1", "--timeline", TempDir() + "/t.json", "sh"})).ok());
}

}  // namespace
}  // namespace overlap::launcher
