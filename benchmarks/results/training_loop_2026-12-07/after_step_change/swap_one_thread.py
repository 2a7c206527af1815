"""A one-off: CleanRL's loop on one thread with SyncVectorEnv, with the package imported, and with the swap (output: swap_one_thread.txt)."""
import json, subprocess, sys, statistics
from parallel_rollouts.conformance.rounds import run_rounds
runs = {
 "sync": ["-m", "examples.ppo_recipe.cleanrl_loop", "--vector-env", "SyncVectorEnv", "--torch-threads", "1"],
 "sync+import": ["-c", "import parallel_rollouts, json; from examples.ppo_recipe import cleanrl_loop as c; print(json.dumps(c.train(c.Args(vector_env='SyncVectorEnv', torch_threads=1))))"],
 "pve": ["-m", "examples.ppo_recipe.cleanrl_loop", "--vector-env", "ParallelVectorEnv", "--torch-threads", "1"],
}
def one(name):
    out = subprocess.run([sys.executable, *runs[name]], capture_output=True, text=True, cwd="/work/main", check=True).stdout
    r = json.loads(out.strip().splitlines()[-1]); return r["loop_seconds"], r["step_seconds"]
m = run_rounds(list(runs), one, rounds=7)
base = [x[0] for x in m.samples[0]]
for name, s in zip(runs, m.samples):
    print(name, "loop", round(statistics.median(x[0] for x in s), 2), "step", round(statistics.median(x[1] for x in s), 3), "speed vs sync", round(statistics.median(b / x[0] for b, x in zip(base, s)), 3), [round(b / x[0], 2) for b, x in zip(base, s)])
