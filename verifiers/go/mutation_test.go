package verifier

import "testing"

// Every byte of every valid vector flipped (three ways), every truncation and two
// extensions: all must be rejected, and none may panic.

type valid struct {
	name  string
	root  Digest
	c     vCase
	proof []byte
}

func validVectors(t testing.TB) []valid {
	var out []valid
	for _, tr := range loadVectors(t).Trees {
		root := tr.root(t)
		add := func(kind string, cs []vCase, field func(vCase) string) {
			for _, c := range cs {
				c.Kind = kind
				out = append(out, valid{tr.Name + "/" + kind, root, c, unhex(t, field(c))})
			}
		}
		proof := func(c vCase) string { return c.Proof }
		add("membership", tr.Membership, proof)
		add("absence", tr.Absence, proof)
		add("range", tr.Range, proof)
		add("chunk", tr.Chunks, func(c vCase) string { return c.Bytes })
	}
	return out
}

func TestEveryMutationOfEveryValidVectorIsRejected(t *testing.T) {
	vs := validVectors(t)
	tried := 0
	for _, v := range vs {
		if _, kind := run(t, v.root, v.c, v.proof); kind != "" {
			t.Fatalf("%s: the unmodified vector is rejected (%s)", v.name, kind)
		}
		m := append([]byte(nil), v.proof...)
		for i := range m {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				m[i] ^= x
				if _, kind := run(t, v.root, v.c, m); kind == "" {
					t.Errorf("%s: accepted with byte %d xor %#02x", v.name, i, x)
				}
				m[i] ^= x
				tried++
			}
		}
		for n := 0; n < len(v.proof); n++ {
			if _, kind := run(t, v.root, v.c, v.proof[:n:n]); kind == "" {
				t.Errorf("%s: accepted truncated to %d bytes", v.name, n)
			}
			tried++
		}
		for _, b := range []byte{0x00, 0x01} {
			longer := append(append([]byte(nil), v.proof...), b)
			if _, kind := run(t, v.root, v.c, longer); kind != KindDecode {
				t.Errorf("%s: extended by %#02x: kind %q, want Decode", v.name, b, kind)
			}
			tried++
		}
	}
	t.Logf("%d mutants of %d valid vectors rejected", tried, len(vs))
}
