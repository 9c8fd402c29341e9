#!/usr/bin/env bash
# The long reliability runs (issue 6), as one command. Prints the figures RELIABILITY.md
# quotes and keeps every log under target/reliability/<UTC time>/.
#
#   scripts/reliability-long.sh              # everything, defaults below (about 1 h on 2 cores)
#   FUZZ_SECS=60 CRASH_RUNS=50 scripts/reliability-long.sh   # shorter
#   SKIP_FUZZ=1 scripts/reliability-long.sh  # without cargo-fuzz
#   SKIP="crash races" scripts/reliability-long.sh   # leave out suites by name
#
# Sizes (environment):
#   CRASH_RUNS=200   sp-sync SIGKILL runs (tests/reliability_crash.rs); CRASH_PAR=2 at once
#   RACE_HOOKS=200 RACE_SESSIONS=20 RACE_MESSAGES=5000   (tests/reliability_races.rs)
#   PROPTEST_CASES=20000  cases per property test; ALLOW_CASES=200 end-to-end allow cases
#   FUZZ_SECS=600    seconds of cargo-fuzz per target (5 targets); needs nightly, or stable
#                    with RUSTC_BOOTSTRAP=1, and `cargo install cargo-fuzz`
#   SP_SEED=<n>      replay a run's random choices (each test prints the seed it used)
set -euo pipefail
cd "$(dirname "$0")/.."

CRASH_RUNS=${CRASH_RUNS:-200}
CRASH_PAR=${CRASH_PAR:-2}
RACE_HOOKS=${RACE_HOOKS:-200}
RACE_SESSIONS=${RACE_SESSIONS:-20}
RACE_MESSAGES=${RACE_MESSAGES:-5000}
PROPTEST_CASES=${PROPTEST_CASES:-20000}
ALLOW_CASES=${ALLOW_CASES:-200}
FUZZ_SECS=${FUZZ_SECS:-600}
OUT=target/reliability/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
echo "logs in $OUT"
started=$(date +%s)

run() { # name, env..., -- cargo args
  local name=$1; shift
  case " ${SKIP:-} " in *" $name "*) echo "== $name skipped"; return;; esac
  local t0; t0=$(date +%s)
  echo "== $name"
  if env "$@" > "$OUT/$name.log" 2>&1; then
    echo "   ok in $(( $(date +%s) - t0 )) s"
  else
    echo "   FAILED in $(( $(date +%s) - t0 )) s (see $OUT/$name.log)"; tail -40 "$OUT/$name.log"; exit 1
  fi
  grep -ho 'FIGURE .*\|SP_SEED=.*\|test result.*' "$OUT/$name.log" | sed 's/^/   /' || true
}

cargo build --tests -q
run crash SP_CRASH_RUNS="$CRASH_RUNS" SP_CRASH_PAR="$CRASH_PAR" \
  cargo test -q --test reliability_crash -- --nocapture --test-threads=1
run races SP_RACE_HOOKS="$RACE_HOOKS" SP_RACE_SESSIONS="$RACE_SESSIONS" SP_RACE_MESSAGES="$RACE_MESSAGES" \
  cargo test -q --test reliability_races -- --nocapture
run faults cargo test -q --test reliability_faults -- --nocapture --test-threads=4
run hostile SP_PROPTEST_CASES="$PROPTEST_CASES" SP_ALLOW_CASES="$ALLOW_CASES" \
  cargo test -q --test reliability_hostile -- --nocapture
run secrets cargo test -q --test reliability_secrets -- --nocapture

if [ -z "${SKIP_FUZZ:-}" ]; then
  if ! command -v cargo-fuzz >/dev/null; then
    echo "cargo-fuzz not installed: cargo install cargo-fuzz (or SKIP_FUZZ=1)"; exit 1
  fi
  tc=""
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then tc="+nightly"; else export RUSTC_BOOTSTRAP=1; fi
  for t in hook_stdin render control_message permission_flow url; do
    echo "== fuzz $t ($FUZZ_SECS s)"
    mkdir -p "fuzz/corpus/$t"
    # -s none: safe Rust plus bundled SQLite; ASan finds nothing more here and halves the speed.
    # The stored corpus is the seed; what the run adds goes to a scratch folder (merge it
    # into fuzz/corpus/$t with `cargo fuzz cmin` when it found new coverage).
    mkdir -p "$OUT/corpus-$t"
    seeds=("fuzz/corpus/$t"); [ -d "fuzz/regressions/$t" ] && seeds+=("fuzz/regressions/$t")
    if ! cargo $tc fuzz run -s none "$t" "$OUT/corpus-$t" "${seeds[@]}" -- \
        -max_total_time="$FUZZ_SECS" -rss_limit_mb=1024 -timeout=10 -max_len=65536 -print_final_stats=1 \
        > "$OUT/fuzz-$t.log" 2>&1; then
      echo "   FAILED (see $OUT/fuzz-$t.log and fuzz/artifacts/$t/)"; tail -60 "$OUT/fuzz-$t.log"; exit 1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$OUT/fuzz-$t.log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$OUT/fuzz-$t.log" | tail -1 | grep -o '[0-9]*')
    rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$OUT/fuzz-$t.log" | grep -o '[0-9]*$' | tail -1)
    echo "   FIGURE fuzz ${t}_executions=${execs:-?} ${t}_coverage_edges=${cov:-?} ${t}_peak_rss_mb=${rss:-?} crashes=0"
  done
fi
echo "== all held in $(( $(date +%s) - started )) s"
