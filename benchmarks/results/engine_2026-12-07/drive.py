import json, subprocess, statistics, sys, os
trees = {"before": "/tmp/before-tree/src", "after": sys.argv[3] if len(sys.argv) > 3 else "/work/main/src"}
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
results = {name: [] for name in trees}
for r in range(rounds):
    order = list(trees) if r % 2 == 0 else list(reversed(list(trees)))
    for name in order:
        env = dict(os.environ, PYTHONPATH=trees[name])
        proc = subprocess.run([sys.executable, "/tmp/ab/measure.py"], env=env, capture_output=True, text=True, cwd="/tmp/ab")
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else None
        if proc.returncode or not line:
            print(proc.stderr[-3000:]); sys.exit(1)
        results[name].append(json.loads(line))
    print("round", r + 1, flush=True)
keys = [k for k in results["after"][0] if k != "tree"]
report = {"rounds": rounds, "trees": trees, "per_round": results, "ratios_after_over_before": {}}
for k in keys:
    ratios = [a[k] / b[k] for a, b in zip(results["after"], results["before"])]
    report["ratios_after_over_before"][k] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    print(f"{k}: after/before time {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]; before {statistics.median([b[k] for b in results['before']]):.1f}, after {statistics.median([a[k] for a in results['after']]):.1f}")
json.dump(report, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/ab/report.json", "w"), indent=1)
