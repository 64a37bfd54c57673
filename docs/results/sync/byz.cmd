byz: /work/target-netlab/release/bavl-synclab run --exp byz --reps 3 --out docs/results/sync (2026-11-23T14:00:18Z)
