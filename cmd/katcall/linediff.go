package main

import (
	"bytes"
	"fmt"
	"strings"
)

// diffContext is how many unchanged lines surround each hunk.
const diffContext = 3

// maxLCSCells bounds the line-matching table; above it the changed middle of
// two files is shown as a whole removal and insertion.
const maxLCSCells = 1 << 22

type diffOp struct {
	kind byte // ' ', '-' or '+'
	line string
}

// unifiedDiff returns a unified diff turning a into b, with the headers
// aName and bName, or "" when they are equal. It is a small LCS line diff,
// enough for Quadlet files (which are size-capped).
func unifiedDiff(aName, bName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	ops := lineOps(splitLines(a), splitLines(b))
	aPos, bPos := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for k, op := range ops {
		aPos[k+1], bPos[k+1] = aPos[k], bPos[k]
		if op.kind != '+' {
			aPos[k+1]++
		}
		if op.kind != '-' {
			bPos[k+1]++
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	for i := 0; i < len(ops); {
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		end := i // the last changed op of this hunk
		for j := i; j < len(ops) && j-end <= 2*diffContext; j++ {
			if ops[j].kind != ' ' {
				end = j
			}
		}
		start, stop := max(0, i-diffContext), min(len(ops), end+diffContext+1)
		aLen, bLen := aPos[stop]-aPos[start], bPos[stop]-bPos[start]
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aPos[start], aLen), hunkRange(bPos[start], bLen))
		for _, op := range ops[start:stop] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			out.WriteByte('\n')
		}
		i = stop
	}
	return out.String()
}

// hunkRange formats a hunk side as diff(1) does: an empty side names the
// line before it.
func hunkRange(before, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", before)
	}
	if n == 1 {
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// lineOps matches the lines of a and b: the common prefix and suffix
// directly, the middle by longest common subsequence.
func lineOps(a, b []string) []diffOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]diffOp, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{' ', l})
	}
	ops = append(ops, middleOps(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

func middleOps(a, b []string) []diffOp {
	n, m := len(a), len(b)
	var ops []diffOp
	if n*m > maxLCSCells {
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	w := m + 1
	lcs := make([]int32, (n+1)*w) // lcs[i*w+j]: LCS length of a[i:] and b[j:]
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i++
			j++
		case lcs[(i+1)*w+j] >= lcs[i*w+j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}
