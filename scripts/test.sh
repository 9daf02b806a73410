#!/usr/bin/env bash
# The project's test command (README): starts the test stores, runs every
# test of every crate with all features, and stops the stores, also on failure.
# Under this script a backend test whose store is missing fails.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

scripts/stores.sh up
trap 'scripts/stores.sh down' EXIT
# shellcheck disable=SC1091
source target/stores/env
unset OMNILOCK_TEST_ALLOW_MISSING

# One build of the whole workspace, shared by every test binary.
cargo test --workspace --all-features --no-fail-fast "$@"
