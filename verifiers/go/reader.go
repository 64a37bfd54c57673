package verifier

// reader is a cursor over untrusted bytes: it never reads past its slice, and every length
// it returns has been checked against the bytes left.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) remaining() int { return len(r.b) - r.pos }

func (r *reader) u8() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, decodeErr(r.pos, "input truncated")
	}
	v := r.b[r.pos]
	r.pos++
	return v, nil
}

func (r *reader) take(n uint64) ([]byte, error) {
	if n > uint64(r.remaining()) {
		return nil, decodeErr(r.pos, "input truncated")
	}
	s := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s, nil
}

func (r *reader) digest() (digest, error) {
	var d digest
	s, err := r.take(32)
	if err != nil {
		return d, err
	}
	copy(d[:], s)
	return d, nil
}

// varint reads a minimal unsigned LEB128 varint of at most 64 bits (10 bytes, the tenth
// 0 or 1, no redundant zero group).
func (r *reader) varint() (uint64, error) {
	start := r.pos
	var v uint64
	for i := 0; i < 10; i++ {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if i == 9 && b > 1 {
			return 0, decodeErr(start, "malformed varint")
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			if i > 0 && b == 0 {
				return 0, decodeErr(start, "malformed varint")
			}
			return v, nil
		}
	}
	return 0, decodeErr(start, "malformed varint")
}

func (r *reader) varintIn(min, max uint64, what string) (uint64, error) {
	at := r.pos
	v, err := r.varint()
	if err != nil {
		return 0, err
	}
	if v < min || v > max {
		return 0, decodeErr(at, "%s = %d out of range", what, v)
	}
	return v, nil
}

func (r *reader) bytes(max uint64, what string) ([]byte, error) {
	n, err := r.varintIn(0, max, what)
	if err != nil {
		return nil, err
	}
	return r.take(n)
}
