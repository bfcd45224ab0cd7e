package sops

import "regexp"

func regexpMust(re string) *regexp.Regexp { return regexp.MustCompile(re) }
