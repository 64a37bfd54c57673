cpu: /work/target-netlab/release/bavl-synclab run --exp s7,cpu --capacity 1024 --reps 3 --out docs/results/sync (2026-11-23T14:07:37Z)
