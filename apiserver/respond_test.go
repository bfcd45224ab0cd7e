package apiserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestWriteJSONListMatchesWriteJSON: a list written an item at a time reads
// as the same JSON, indented the same, as the whole list written at once.
func TestWriteJSONListMatchesWriteJSON(t *testing.T) {
	t.Parallel()
	type item struct {
		Name string            `json:"name"`
		Tags map[string]string `json:"tags,omitempty"`
		N    []int             `json:"n"`
	}
	for _, n := range []int{0, 1, 3} {
		in := make([]int, n)
		want := []item{}
		for i := range in {
			in[i] = i
			want = append(want, item{Name: "w" + strconv.Itoa(i), Tags: map[string]string{"k": "v"}, N: []int{i, i + 1}})
		}
		conv := func(i int) item { return want[i] }
		list, whole := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSONList(list, http.StatusOK, in, conv)
		writeJSON(whole, http.StatusOK, want)
		if !bytes.Equal(list.Body.Bytes(), whole.Body.Bytes()) {
			t.Errorf("%d items: writeJSONList wrote\n%s\nwriteJSON\n%s", n, list.Body, whole.Body)
		}
		var back []item
		if err := json.Unmarshal(list.Body.Bytes(), &back); err != nil || len(back) != n {
			t.Errorf("%d items: read back %d, %v", n, len(back), err)
		}
		if ct := list.Header().Get("Content-Type"); ct != "application/json" || list.Code != http.StatusOK {
			t.Errorf("%d items: %d %q", n, list.Code, ct)
		}
	}
}
