#!/usr/bin/env bash
# zerotrain's progress line, its JSON-lines history and stopping on a signal:
#  - the line's format, and when it is printed: --log-interval N (and the
#    last step), the default cadence of steps_per_print, none with 0;
#  - the log (REPORT.jsonl beside --report, or --log-file) holds every step's
#    loss and every evaluation, equal to the report's, and an end record; a
#    resumed run appends to it; a run killed with SIGKILL keeps every step up
#    to its last printed line;
#  - SIGTERM to rank 0 alone stops both ranks after the same step, saves a
#    checkpoint and exits 0, and resuming from it ends on the weights of an
#    uninterrupted run (bit for bit); SIGUSR1 to rank 1 alone without
#    --save-dir says nothing was saved and exits 128 + 10; SIGUSR1 to mpirun
#    (which forwards it to every rank) stops and saves too;
#  - a stop that stalls ends: at a second SIGTERM, or ZT_STOP_GRACE seconds
#    after the first (exit 143 either way, with a line saying why), and
#    SIGINT ends a run at once (exit 130);
#  - an unwritable --log-file is refused before training.
set -eu
cd "$(dirname "$0")/../.."
source tests/env.sh
zt_scratch

cat >"$tmp/c.json" <<JSON
{"train_batch_size": 32, "steps_per_print": 5,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}
JSON
mlp=(--config "$tmp/c.json" --model mlp --width 64 --layers 3 --in-size 32 --out-size 10)
line_re='^step [0-9]+/[0-9]+ \| loss [0-9]+\.[0-9]{4} \| [0-9][0-9,.]* ms/step \| [0-9][0-9,.]* samples/s \| elapsed [0-9]+:[0-9]{2} \| eta [0-9]+:[0-9]{2}$'

# ---- when lines are printed
steps_printed() { grep -E '^step [0-9]+/' "$1" | sed -E 's|^step ([0-9]+)/.*|\1|' | tr '\n' ' '; }
expect 0 "zerotrain: done: 20 steps" -- $ZT_MPIRUN -np 2 ./zerotrain "${mlp[@]}" --steps 20 --log-interval 7
[ "$(steps_printed "$tmp/out")" = "1 7 14 20 " ] || { cat "$tmp/out"; fail "--log-interval 7 printed steps $(steps_printed "$tmp/out")"; }
grep -E '^step ' "$tmp/out" | grep -vqE "$line_re" && { cat "$tmp/out"; fail "a progress line does not read 'step N/M | loss | ms/step | samples/s | elapsed | eta'"; }
expect 0 "zerotrain: done: 12 steps" -- ./zerotrain "${mlp[@]}" --steps 12
[ "$(steps_printed "$tmp/out")" = "1 5 10 12 " ] || { cat "$tmp/out"; fail "steps_per_print 5 printed steps $(steps_printed "$tmp/out")"; }
grep -q "^\[Rank 0\] step=10, skipped=0" "$tmp/out" || { cat "$tmp/out"; fail "DeepSpeed's own line is gone"; }
expect 0 "zerotrain: done: 12 steps" -- ./zerotrain "${mlp[@]}" --steps 12 --log-interval 0
[ -z "$(steps_printed "$tmp/out")" ] || { cat "$tmp/out"; fail "--log-interval 0 printed progress lines"; }
expect 2 "cannot write log /nonexistent/dir/log.jsonl" -- ./zerotrain "${mlp[@]}" --steps 1 --log-file /nonexistent/dir/log.jsonl
expect 2 "--log-file and --log-interval need a training run" -- ./zerotrain --estimate-memory "${mlp[@]}" --log-interval 5
echo "ok: progress lines at --log-interval, steps_per_print and never"

# ---- the log: every step and evaluation, equal to the report's; appended on resume
shakespeare="$ZT_SHARED/data/tinyshakespeare/input.txt"
gpt=(--config "$tmp/c.json" --model gptlite --data "$shakespeare" --n-layer 1 --n-embd 16 --n-head 2
     --block-size 16 --dropout 0 --eval-interval 4 --eval-iters 2)
expect 0 "tokens/s" -- $ZT_MPIRUN -np 2 ./zerotrain "${gpt[@]}" --steps 10 --report "$tmp/g.json" --save-dir "$tmp/gck"
expect 0 "zerotrain: done: 3 steps in .* (resumed at step 10, now at step 13)" -- $ZT_MPIRUN -np 2 ./zerotrain \
    "${gpt[@]}" --steps 13 --report "$tmp/g2.json" --log-file "$tmp/g.jsonl" --save-dir "$tmp/gck" --resume
$ZT_PYTHON - "$tmp/g.jsonl" "$tmp/g.json" "$tmp/g2.json" <<'PY'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
runs = [json.load(open(f)) for f in sys.argv[2:]]
starts = [r for r in recs if r["event"] == "start"]
assert [(s["first_step"], s["steps"]) for s in starts] == [(0, 10), (10, 13)], starts
assert starts[0]["tokens_per_sample"] == 16 and starts[0]["world_size"] == 2, starts[0]
steps = [r for r in recs if r["event"] == "step"]
assert [s["step"] for s in steps] == list(range(1, 14)), [s["step"] for s in steps]
hist = runs[1]["loss_history"]   # the resumed run's report carries the whole history
assert len(hist) == 13
for s in steps:
    assert math.isclose(s["loss"], hist[s["step"] - 1], rel_tol=1e-9), (s, hist[s["step"] - 1])
evals = [(r["step"], r["val_loss"]) for r in recs if r["event"] == "eval"]
want = [(e["step"], e["loss"]) for e in runs[0]["eval"]] + [(e["step"], e["loss"]) for e in runs[1]["eval"]]
assert [e[0] for e in evals] == [4, 8, 10, 12, 13], evals
for (s, v), (ws, wv) in zip(evals, want):
    assert s == ws and math.isclose(v, wv, rel_tol=1e-9), (s, v, ws, wv)
ends = [r for r in recs if r["event"] == "end"]
assert [(e["reason"], e["steps_run"], e["global_step"]) for e in ends] == [("done", 10, 10), ("done", 3, 13)], ends
prog = [r for r in recs if r["event"] == "progress"]
assert prog[-1]["step"] == 13 and prog[-1]["eta_s"] == 0 and prog[-1]["tokens_per_s"] > 0, prog[-1]
print(f"ok: the log holds steps 1-13 and 5 evaluations equal to the reports, appended on resume")
PY

# ---- signals. A background job, its ranks' pids, a wait for its progress.
start_job() { # name, args...: $job is mpirun's pid, output in $tmp/$1.out
    local name=$1; shift
    $ZT_MPIRUN -np 2 ./zerotrain "$@" >"$tmp/$name.out" 2>&1 &
    job=$!
}
wait_for() { # file pattern: up to 60 s
    for _ in $(seq 600); do grep -qE "$2" "$1" && return 0; sleep 0.1; done
    cat "$1"; fail "no '$2' in $1 after 60 s"
}
rank_pid() { # rank: the pid of that rank of $job
    local c
    for c in $(pgrep -P "$job"); do
        if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
            echo "$c"; return 0
        fi
    done
    fail "no rank $1 under mpirun $job"
}
finish() { # expected exit code: waits for $job (60 s at most)
    local rc=0
    for _ in $(seq 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "the job did not end within 60 s of the signal"; }
    wait "$job" || rc=$?
    [ "$rc" = "$1" ] || { cat "$tmp/$name.out"; fail "$name: exit $rc, expected $1"; }
}

long=("${mlp[@]}" --steps 1000000 --log-interval 1)
name=term; start_job $name "${long[@]}" --save-dir "$tmp/ck" --report "$tmp/term.json"
wait_for "$tmp/$name.out" '^step 30/'
kill -TERM "$(rank_pid 0)"
finish 0
grep -q "zerotrain: SIGTERM reached 1 of 2 rank(s): stopping after step" "$tmp/$name.out" || { cat "$tmp/$name.out"; fail "no stop line"; }
grep -q "^zerotrain: stopped: " "$tmp/$name.out" || { cat "$tmp/$name.out"; fail "no 'stopped:' line"; }
stop=$(sed -nE 's/.*stopping after step ([0-9]+) of.*/\1/p' "$tmp/$name.out")
[ "$(cat "$tmp/ck/latest")" = "global_step$stop" ] || fail "latest is $(cat "$tmp/ck/latest"), not the stop step $stop"
tail -1 "$tmp/term.jsonl" | grep -q '"event":"end","reason":"stopped"' || { tail -3 "$tmp/term.jsonl"; fail "no stopped end record"; }
echo "ok: SIGTERM to rank 0 stopped both ranks after step $stop, saved it, exit 0"
# Resumed, it ends where an uninterrupted run ends.
end=$((stop + 5))
expect 0 "zerotrain: done: 5 steps" -- $ZT_MPIRUN -np 2 ./zerotrain "${mlp[@]}" --steps $end --save-dir "$tmp/ck" \
    --resume --dump-params "$tmp/resumed.bin"
expect 0 "zerotrain: done: $end steps" -- $ZT_MPIRUN -np 2 ./zerotrain "${mlp[@]}" --steps $end \
    --dump-params "$tmp/straight.bin"
cmp "$tmp/resumed.bin" "$tmp/straight.bin" || fail "stopped at $stop and resumed to $end differs from a straight run"
echo "ok: stopped at step $stop and resumed to $end = uninterrupted (cmp)"

name=usr1; start_job $name "${long[@]}"
wait_for "$tmp/$name.out" '^step 30/'
kill -USR1 "$(rank_pid 1)"
finish 138
grep -q "SIGUSR1 reached 1 of 2 rank(s): stopping after step .* nothing is saved (no --save-dir)" "$tmp/$name.out" ||
    { cat "$tmp/$name.out"; fail "no 'nothing is saved' line"; }
echo "ok: SIGUSR1 to rank 1 without --save-dir: both stop, exit 138"

name=mpirun; start_job $name "${long[@]}" --save-dir "$tmp/ck2"
wait_for "$tmp/$name.out" '^step 30/'
kill -USR1 "$job"
finish 0
# mpirun forwards the signal to both ranks, but with sub-millisecond steps
# the ranks may agree to stop before the second delivery lands: either count
# is right, so long as every rank stops after the same step and it is saved.
grep -qE "SIGUSR1 reached [12] of 2 rank\(s\)" "$tmp/$name.out" || { cat "$tmp/$name.out"; fail "no stop line after SIGUSR1 to mpirun"; }
grep -q "saved checkpoint $tmp/ck2/global_step" "$tmp/$name.out" || { cat "$tmp/$name.out"; fail "no checkpoint after SIGUSR1 to mpirun"; }
echo "ok: SIGUSR1 to mpirun stopped both ranks, saved, exit 0"

# ---- a stop must end: a save that stalls (ZT_CKPT_STALL_RANK: rank 0 sleeps
# 30 s as it starts) ends at a second SIGTERM, or ZT_STOP_GRACE after the
# first, at once with 128 + 15 and a line that says why; SIGINT at any time.
name=term2; ZT_CKPT_STALL_RANK=0 start_job $name "${long[@]}" --save-dir "$tmp/ck3"
wait_for "$tmp/$name.out" '^step 30/'
kill -TERM "$(rank_pid 0)"
wait_for "$tmp/$name.out" 'stopping after step'
sleep 0.5
kill -TERM "$(rank_pid 0)"
t0=$SECONDS
finish 143
grep -q "zerotrain: a second SIGTERM: exiting now, without a checkpoint of this step" "$tmp/$name.out" ||
    { cat "$tmp/$name.out"; fail "no line for the second SIGTERM"; }
[ ! -e "$tmp/ck3/latest" ] || fail "a save cut short by a second SIGTERM published latest"
echo "ok: a second SIGTERM during a stalled save ended the job in $((SECONDS - t0)) s, exit 143"

name=grace; ZT_STOP_GRACE=2 ZT_CKPT_STALL_RANK=0 start_job $name "${long[@]}" --save-dir "$tmp/ck4"
wait_for "$tmp/$name.out" '^step 30/'
t0=$SECONDS
kill -TERM "$(rank_pid 1)"
finish 143
grep -q "zerotrain: still running 2 s after SIGTERM (ZT_STOP_GRACE): exiting now" "$tmp/$name.out" ||
    { cat "$tmp/$name.out"; fail "no grace line"; }
[ $((SECONDS - t0)) -lt 20 ] || fail "the grace of 2 s took $((SECONDS - t0)) s"
echo "ok: ZT_STOP_GRACE=2 ended a stalled stop in $((SECONDS - t0)) s, exit 143"

name=int; start_job $name "${long[@]}"
wait_for "$tmp/$name.out" '^step 30/'
kill -INT "$(rank_pid 1)"
finish 130
grep -q "zerotrain: SIGINT: exiting now" "$tmp/$name.out" || { cat "$tmp/$name.out"; fail "no SIGINT line"; }
echo "ok: SIGINT to rank 1 ended the job at once, exit 130"

# ---- a killed run keeps its history up to its last line
name=kill; start_job $name "${mlp[@]}" --steps 1000000 --log-interval 25 --log-file "$tmp/kill.jsonl"
wait_for "$tmp/$name.out" '^step 100/'
kill -KILL "$(rank_pid 0)" "$(rank_pid 1)"
wait "$job" || true
last=$(grep -E '^step [0-9]+/' "$tmp/$name.out" | tail -1 | sed -E 's|^step ([0-9]+)/.*|\1|')
$ZT_PYTHON - "$tmp/kill.jsonl" "$last" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().split("\n")
recs = [json.loads(l) for l in lines[:-1]]        # a torn last line is possible; the rest parse
steps = [r["step"] for r in recs if r["event"] == "step"]
last = int(sys.argv[2])
assert steps[:last] == list(range(1, last + 1)), (steps[:5], last)
assert not any(r["event"] == "end" for r in recs)
print(f"ok: a SIGKILLed run's log holds steps 1-{len(steps)} (last printed line: step {last})")
PY
