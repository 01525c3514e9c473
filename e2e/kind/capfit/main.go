// Command capfit runs runc after removing, from the container's (or exec'd process's) OCI
// capability lists, every capability this host's bounding set lacks.
//
// Docker 20.10 gives a privileged container every capability up to cap_last_cap; on a host
// whose bounding set misses one of them runc fails with "unable to apply caps: operation not
// permitted", and kind runs its nodes privileged. Registered as Docker's default runtime, this
// wrapper makes such a spec one the host can honour; everything else passes through unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Linux capability names by number (include/uapi/linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN",
	"CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

const realRunc = "/usr/sbin/runc"

func main() {
	args := os.Args[1:]
	if path := specToFit(args); path != "" {
		if err := fitSpec(path); err != nil {
			fmt.Fprintf(os.Stderr, "capfit: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
	runc := os.Getenv("CAPFIT_RUNC")
	if runc == "" {
		runc = realRunc
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "capfit: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// specToFit returns the JSON file holding the process to start: the bundle's config.json for
// create/run, the --process file for exec; "" for every other runc command.
func specToFit(args []string) string {
	command, bundle, process := "", ".", ""
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func() string {
			if eq := strings.IndexByte(arg, '='); eq >= 0 {
				return arg[eq+1:]
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case arg == "--bundle" || arg == "-b" || strings.HasPrefix(arg, "--bundle="):
			bundle = value()
		case arg == "--process" || arg == "-p" || strings.HasPrefix(arg, "--process="):
			process = value()
		case command == "" && !strings.HasPrefix(arg, "-"):
			command = arg
		case command == "" && takesValue(arg):
			i++ // a global option's value (--root X, --log X ...), not the command
		}
	}
	switch command {
	case "create", "run":
		return filepath.Join(bundle, "config.json")
	case "exec":
		return process
	}
	return ""
}

func takesValue(flag string) bool {
	if strings.Contains(flag, "=") {
		return false
	}
	switch flag {
	case "--root", "--log", "--log-format", "--criu", "--rootless":
		return true
	}
	return false
}

func boundingSet() (map[string]bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if !strings.HasPrefix(line, "CapBnd:") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(line[len("CapBnd:"):]), 16, 64)
		if err != nil {
			return nil, err
		}
		allowed := map[string]bool{}
		for bit, name := range capNames {
			if mask&(1<<uint(bit)) != 0 {
				allowed[name] = true
			}
		}
		return allowed, nil
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// fitSpec rewrites the capability lists of the spec at path (a full OCI config with a
// "process" object, or a bare process as given to exec) in place, keeping every other field.
func fitSpec(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	allowed, err := boundingSet()
	if err != nil {
		return err
	}
	if processRaw, ok := doc["process"]; ok {
		var process map[string]json.RawMessage
		if err := json.Unmarshal(processRaw, &process); err != nil {
			return err
		}
		changed, err := fitCapabilities(process, allowed)
		if err != nil || !changed {
			return err
		}
		if doc["process"], err = json.Marshal(process); err != nil {
			return err
		}
	} else if changed, err := fitCapabilities(doc, allowed); err != nil || !changed {
		return err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

func fitCapabilities(process map[string]json.RawMessage, allowed map[string]bool) (bool, error) {
	capsRaw, ok := process["capabilities"]
	if !ok {
		return false, nil
	}
	var caps map[string][]string
	if err := json.Unmarshal(capsRaw, &caps); err != nil {
		return false, err
	}
	changed := false
	for set, names := range caps {
		kept := names[:0:0]
		for _, name := range names {
			if allowed[name] {
				kept = append(kept, name)
			}
		}
		if len(kept) != len(names) {
			caps[set], changed = kept, true
		}
	}
	if !changed {
		return false, nil
	}
	var err error
	process["capabilities"], err = json.Marshal(caps)
	return true, err
}
