s7: target/release/bavl-synclab run --exp s7,cpu --reps 3 --capacity 1024 --out docs/results/sync (2026-11-23T22:38:34Z)
