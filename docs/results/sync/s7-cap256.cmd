s7cap256: /work/target-netlab/release/bavl-synclab run --exp s7,cpu --reps 3 --out docs/results/sync (2026-11-23T13:06:00Z)
