#!/usr/bin/env bash
# The adversarial schedule harness (tests/chaos, make chaos) on a fixed
# seed for a short while: migrations of every memory kind and mode,
# plaintext and TLS, under link cuts and delays, daemon and engine kills,
# a full state disk, a source process continued, target exits, forks,
# munmaps and discards, frames corrupted, truncated and replayed, and
# damaged images. Each migration must end complete and byte-exact or
# failed loudly with its target stopped or poisoned; a violation, a daemon
# that died unasked or a sanitizer report fails the test. The seed's
# rounds replay with CHAOS_SEED=SEED CHAOS_ONLY=ROUND make chaos.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing"
SEED=${T_CHAOS_SEED:-35}
SECS=${T_CHAOS_SECONDS:-150}
rc=0
python3 "$SRC/tests/chaos/chaos.py" "$B" --seed "$SEED" --seconds "$SECS" --cycle \
	--json "$T/chaos.json" || rc=$?
[ "$rc" = 77 ] && skip "the chaos harness cannot run here"
[ "$rc" = 0 ] || fail "chaos seed $SEED: violations (above)"
python3 - "$T/chaos.json" <<'PY' || fail "chaos seed $SEED: too little was tried"
import json, sys
j = json.load(open(sys.argv[1]))
n = sum(j["injected"].values())
print("== %d migrations, %d faults injected, %d rounds in %.0f s" % (
    j["migrations"], n, j["rounds"], j["seconds"]))
sys.exit(0 if j["migrations"] >= 20 and n >= 15 else 1)
PY
