package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"kat.dws.rip/kat/api"
)

// recordEvent records an event of the API about obj. The call it follows
// has succeeded: a failure to record is logged, never the answer.
func (s *Server) recordEvent(ctx context.Context, obj api.ObjectRef, typ, reason, message string) {
	if err := s.cfg.Repo.RecordEvent(ctx, obj, typ, reason, message); err != nil {
		s.cfg.Logger.Warn().Err(err).Str("object", obj.Path()).Str("reason", reason).Msg("cannot record an event")
	}
}

// listEvents answers GET /v1alpha1/events: the newest limit (default 50)
// events that pass the filter of the query (api.ParseEventFilter), oldest
// first, as a JSON array; with watch=true, those and then every new one as
// it is recorded, one JSON object a line, until the client goes away or
// this server stops leading.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, badRequest("limit: %q is not a non-negative number", v))
			return
		}
		limit = n
	}
	f, err := api.ParseEventFilter(q.Get, s.cfg.Now())
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	watch, err := boolQuery(r, "watch")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	listCtx, cancel := context.WithTimeout(r.Context(), defaultRequestTimeout)
	evs, rev, err := s.cfg.Repo.ListEventsMatching(listCtx, f, limit)
	cancel()
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if !watch {
		writeJSON(w, http.StatusOK, evs)
		return
	}
	ch, err := s.cfg.Repo.WatchEvents(r.Context(), f, rev)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.streamEvents(w, r, evs, ch)
}

// eventKeepalive is how often a watch of events writes an empty line
// while nothing happens, so that proxies and clients see a live stream.
const eventKeepalive = 15 * time.Second

// streamEvents writes evs, then every event of ch, one JSON object a
// line, flushed after each, until ch closes or the client goes away.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, evs []api.Event, ch <-chan api.Event) {
	w.Header().Set("Content-Type", api.ContentTypeNDJSON)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	for _, ev := range evs {
		if enc.Encode(ev) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(eventKeepalive)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if enc.Encode(ev) != nil {
				return
			}
		case <-tick.C:
			if _, err := w.Write([]byte("\n")); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}
