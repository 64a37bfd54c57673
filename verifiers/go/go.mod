module bavl.dev/verifier

go 1.22
