chunk: target/release/bavl-synclab run --exp byz,peers,size,chunk --reps 2 --out docs/results/sync (2026-11-23T21:45:32Z)
