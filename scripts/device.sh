#!/usr/bin/env bash
# The device runner: every job that needs the GPU machine, as one command with subcommands. The device
# has no Boost, Eigen or Catch2 headers, so the binaries are built here and carried (packed into a
# git-ignored bundle); each job then runs there from the repository root and leaves its results under
# $OUT. Each job's steps, options and outputs are in the header of its script in scripts/device/.
#
# Here (build and pack):
#   scripts/device.sh carry [TARGET...]     libfcbench.so, the GPU tests, flashcheck (+ TARGETs) -> .carry-z/
#   scripts/device.sh carry-audit           flashcheck alone -> .carry-z/ (for `audit`)
#   scripts/device.sh carry-bounds          `carry` with bounds_tightness and tc_probe_gpu_test (for `bounds`)
#   scripts/device.sh carry-external        libflashcheck.so, the CLI, the plugin GPU test -> .carry-external/
#   scripts/device.sh carry-fuzz            the libFuzzer harnesses of the sanitizer build -> .carry-fuzz/
# There (on the GPU machine, the bundle carried):
#   scripts/device.sh bench STEP...         tests laws sanitize check perf perf-quick memory ab (.carry-z)
#   scripts/device.sh audit                 the GPU audit and the accumulation audit to N = 65536 (.carry-z)
#   scripts/device.sh check [JOBS...]       flashcheck check on each CUDA kernel, per --jobs value (.carry-z)
#   scripts/device.sh bounds                the error model's probe and tightness on the GPU (.carry-z)
#   scripts/device.sh mutants [STEP...]     kills controls sanitize shapes seeds: the CUDA mutants (.carry-z)
#   scripts/device.sh fuzz [MODE...]        small big x2: flashcheck fuzz on the CUDA kernels (.carry-z)
#   scripts/device.sh libfuzzer SECONDS [HARNESS...]   the long libFuzzer run (.carry-fuzz)
#   scripts/device.sh external STEP... [-- OPTIONS]    tests plugin-tests python-tests audit (.carry-external)
# With the device tools: run(command="bash scripts/device.sh bench tests", carry=[".carry-z"]).
# Where each job's results are kept in git: results/README.md.
set -uo pipefail
jobs=$(cd "$(dirname "$0")/device" && pwd)
job=${1:-}
[ $# -gt 0 ] && shift
case $job in
  carry) exec bash "$jobs/carry.sh" "$@" ;;
  carry-audit) exec bash "$jobs/carry_audit.sh" "$@" ;;
  carry-bounds) exec bash "$jobs/bounds.sh" build "$@" ;;
  carry-external) exec bash "$jobs/external.sh" carry "$@" ;;
  carry-fuzz) exec bash "$jobs/libfuzzer.sh" carry "$@" ;;
  bench) exec bash "$jobs/bench.sh" "$@" ;;
  audit) exec bash "$jobs/audit.sh" "$@" ;;
  check) exec bash "$jobs/check.sh" "$@" ;;
  bounds) exec bash "$jobs/bounds.sh" run "$@" ;;
  mutants) exec bash "$jobs/mutants.sh" "$@" ;;
  fuzz) exec bash "$jobs/fuzz.sh" "$@" ;;
  libfuzzer) exec bash "$jobs/libfuzzer.sh" run "$@" ;;
  external) exec bash "$jobs/external.sh" "$@" ;;
  *)
    [ -n "$job" ] && echo "scripts/device.sh: unknown job \"$job\"" >&2
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
