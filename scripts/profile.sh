# Sourced by the scripts that build bavl's binaries: which cargo profile to build them in and
# where cargo puts them. BAVL_PROFILE defaults to `release` (what a person measuring wants);
# CI sets `test`, the profile its test command already built everything in, so nothing is
# compiled twice. CARGO_TARGET_DIR is honoured.
#   BAVL_PROFILE   the cargo profile (release, test, dev, or a custom one)
#   BAVL_BIN       set here: the directory of the built binaries
BAVL_PROFILE="${BAVL_PROFILE:-release}"
_bavl_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The lab builds from lab/, so a relative CARGO_TARGET_DIR is made absolute first.
if [[ -n "${CARGO_TARGET_DIR:-}" ]]; then
    CARGO_TARGET_DIR="$(realpath -m "$CARGO_TARGET_DIR")"
    export CARGO_TARGET_DIR
fi
_bavl_target="${CARGO_TARGET_DIR:-$_bavl_root/target}"
case "$BAVL_PROFILE" in
    release | bench) BAVL_BIN="$_bavl_target/release" ;;
    dev | test) BAVL_BIN="$_bavl_target/debug" ;;
    *) BAVL_BIN="$_bavl_target/$BAVL_PROFILE" ;;
esac
# `bavl_build ARGS...`: cargo build in that profile, quietly, from the repository's root.
bavl_build() { (cd "$_bavl_root" && cargo build -q --profile "$BAVL_PROFILE" "$@"); }
# `bavl_lab_build ARGS...`: the same in the lab's workspace (which shares the target directory).
bavl_lab_build() { (cd "$_bavl_root/lab" && cargo build -q --profile "$BAVL_PROFILE" "$@"); }
