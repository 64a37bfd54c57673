blindcap256: /work/target-netlab/release/bavl-synclab run --exp blind --reps 3 --out docs/results/sync (2026-11-23T13:32:04Z)
