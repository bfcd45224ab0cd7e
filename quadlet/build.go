package quadlet

import (
	"fmt"
	"path"
	"strings"
)

// BuildDefinition is the build file of a workload built from Git
// (conventionally build.kat).
type BuildDefinition struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindBuildDefinition.
	Kind string `json:"kind" yaml:"kind"`
	// Spec may be left out to take every default.
	Spec BuildSpec `json:"spec" yaml:"spec"`
}

// BuildSpec says how to build the image.
type BuildSpec struct {
	// BuildContext is the build context, relative to the repository root
	// and inside it. Default ".".
	BuildContext string `json:"buildContext" yaml:"buildContext"`
	// DockerfilePath is the Dockerfile, relative to BuildContext and inside
	// the repository. Default "./Dockerfile".
	DockerfilePath string `json:"dockerfilePath" yaml:"dockerfilePath"`
	// BuildArgs are passed as --build-arg; keys must be non-empty and
	// contain no '=' or spaces. Default none.
	BuildArgs map[string]string `json:"buildArgs,omitempty" yaml:"buildArgs,omitempty"`
	// TargetStage is the stage of a multi-stage build. Default: the last.
	TargetStage string `json:"targetStage,omitempty" yaml:"targetStage,omitempty"`
	// Platform is os/arch[/variant], for example "linux/arm64". Default:
	// the node's.
	Platform string `json:"platform,omitempty" yaml:"platform,omitempty"`
	// Cache is the registry build cache. Default nil: no cache.
	Cache *BuildCache `json:"cache,omitempty" yaml:"cache,omitempty"`
}

// BuildCache is the registry used as a build cache.
type BuildCache struct {
	// RegistryPath is the image repository cache images are pushed to and
	// pulled from, tagged with the commit. Default none.
	RegistryPath string `json:"registryPath,omitempty" yaml:"registryPath,omitempty"`
}

func validateBuild(c *checker, b *BuildDefinition) {
	c.checkHeader(KindBuildDefinition)
	s := &b.Spec
	c.check("spec.buildContext", s.BuildContext, insidePath)
	c.check("spec.dockerfilePath", s.DockerfilePath, func(p string) string {
		// The Dockerfile is relative to the context; both together must
		// stay inside the repository.
		if path.IsAbs(p) || insidePath(s.BuildContext+"/"+p) != "" {
			return insidePath(p)
		}
		return ""
	})
	for _, k := range sortedKeys(s.BuildArgs) {
		p := fmt.Sprintf("spec.buildArgs[%q]", k)
		c.check(p, k, mapKey)
		if strings.Contains(k, "=") {
			c.errorf(p, "key %q must not contain '='", k)
		}
	}
	if s.TargetStage != "" {
		c.check("spec.targetStage", s.TargetStage, noSpace)
	}
	if s.Platform != "" {
		c.check("spec.platform", s.Platform, platform)
	}
	if s.Cache != nil && s.Cache.RegistryPath != "" {
		c.check("spec.cache.registryPath", s.Cache.RegistryPath, noSpace)
	}
}
