package verifier

import (
	"crypto/sha256"
	"encoding/binary"
)

// The hash inputs of docs/design.md §2: a one-byte domain tag, length-prefixed variable
// fields, big-endian integers, SHA-256.

type digest = [32]byte

const (
	tagValue     = 0x00
	tagLeaf      = 0x01
	tagChunkNode = 0x02
	tagChunk     = 0x03
	tagInner     = 0x04
	tagRoot      = 0x05
)

func hashParts(parts ...[]byte) digest {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	var d digest
	h.Sum(d[:0])
	return d
}

func valueHash(value []byte) digest { return hashParts([]byte{tagValue}, value) }

// leafHash takes a key already checked to be 1..=1024 bytes (checkKey or the decoder), so
// its two-byte length cannot wrap.
func leafHash(key []byte, vh digest) digest {
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(key)))
	return hashParts([]byte{tagLeaf}, n[:], key, vh[:])
}

func chunkNodeHash(l, r digest) digest { return hashParts([]byte{tagChunkNode}, l[:], r[:]) }

func chunkHash(n uint32, inChunkRoot digest) digest {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return hashParts([]byte{tagChunk}, b[:], inChunkRoot[:])
}

func innerHash(height uint8, kc, cc uint64, l, r digest) digest {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], kc)
	binary.BigEndian.PutUint64(b[8:], cc)
	return hashParts([]byte{tagInner, height}, b[:], l[:], r[:])
}

func rootHash(capacity uint32, top digest) digest {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], capacity)
	return hashParts([]byte{tagRoot, formatVersion}, b[:], top[:])
}

// splitPoint is the largest power of two strictly below n (n >= 2): the RFC 6962 split.
func splitPoint(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

// mth is the in-chunk root over leaf hashes.
func mth(leaves []digest) digest {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := splitPoint(len(leaves))
	return chunkNodeHash(mth(leaves[:k]), mth(leaves[k:]))
}
