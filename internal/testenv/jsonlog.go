package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// CheckJSONLine decodes a log line strictly: one JSON object, no key
// twice in any object (log pipelines reject or mangle repeated keys).
func CheckJSONLine(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	if err := checkValue(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

func checkValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key := k.(string)
			if seen[key] {
				return fmt.Errorf("key %q appears twice", key)
			}
			seen[key] = true
			if err := checkValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}
