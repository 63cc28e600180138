#!/usr/bin/env bash
# Cross-check poll benchmark (issue #45; run by hand, not part of the test
# suite): one Clerk poll over MEMBERS users and MEMBERS memberships, then
# one with 1% of memberships gone (and its --dry-run), and one WorkOS poll
# over EVENTS events, each through the release binary against a local
# server answering in the providers' documented shapes, with a floor
# (fetch and parse only) in the same run. MODE=okta runs one Okta System
# Log poll over EVENTS log events instead. See bench/crosscheck.py.
#
#   bench/crosscheck.sh                     # MEMBERS=100000 EVENTS=10000
#   MEMBERS=10000 bench/crosscheck.sh
#   MODE=okta bench/crosscheck.sh           # EVENTS=10000
#   MODE=auth0 bench/crosscheck.sh          # LOGS=10000 (bench/crosscheck_auth0.py)
#   MODE=entra bench/crosscheck.sh          # ENTRA_USERS=50000 ENTRA_GROUPS=5000 ENTRA_MEMBERS=10
#
# `entra` mode (issue #48): one Entra delta baseline over ENTRA_USERS users and
# ENTRA_GROUPS groups of ENTRA_MEMBERS members, then a delta with 1% changed and the
# poll that finds them, against a local Graph (bench/crosscheck_entra.py). The
# mode may also be the first argument (`bench/crosscheck.sh entra`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin hushwatch >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
mode="${MODE:-${1:-all}}"
if [ "$mode" = entra ]; then
    python3 bench/crosscheck_entra.py "$PWD/target/release/hushwatch" "$work" "${ENTRA_USERS:-50000}" "${ENTRA_GROUPS:-5000}" "${ENTRA_MEMBERS:-10}"
elif [ "$mode" = auth0 ]; then
    python3 bench/crosscheck_auth0.py "$PWD/target/release/hushwatch" "$work" "${LOGS:-10000}"
else
    python3 bench/crosscheck.py "$PWD/target/release/hushwatch" "$work" "${MEMBERS:-100000}" "${EVENTS:-10000}" "$mode"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
