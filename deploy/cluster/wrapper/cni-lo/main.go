// Command cni-lo is a chained CNI plugin for the test cluster's loopback-only pods. It runs
// after the standard loopback plugin and changes nothing in the pod's network namespace: it
// only reports the previous result (lo, 127.0.0.1) under the interface name the runtime asked
// for, because containerd's CRI plugin insists on finding the pod's address on that name
// ("eth0"). The pod's address is therefore 127.0.0.1: it has no other.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

type netConf struct {
	CNIVersion string          `json:"cniVersion"`
	PrevResult json.RawMessage `json:"prevResult,omitempty"`
}

type result struct {
	CNIVersion string           `json:"cniVersion"`
	Interfaces []map[string]any `json:"interfaces,omitempty"`
	IPs        []map[string]any `json:"ips,omitempty"`
	Routes     []any            `json:"routes,omitempty"`
	DNS        map[string]any   `json:"dns,omitempty"`
}

func fail(code int, msg string) {
	json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": code, "msg": msg})
	os.Exit(1)
}

func main() {
	switch os.Getenv("CNI_COMMAND") {
	case "VERSION":
		fmt.Println(`{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}`)
	case "DEL", "CHECK", "GC", "STATUS":
	case "ADD":
		stdin, err := io.ReadAll(os.Stdin)
		if err != nil {
			fail(999, err.Error())
		}
		var conf netConf
		if err := json.Unmarshal(stdin, &conf); err != nil {
			fail(6, "bad config: "+err.Error())
		}
		if len(conf.PrevResult) == 0 {
			fail(7, "cni-lo must follow the loopback plugin in a chain")
		}
		var res result
		if err := json.Unmarshal(conf.PrevResult, &res); err != nil {
			fail(6, "bad prevResult: "+err.Error())
		}
		res.CNIVersion = conf.CNIVersion
		for _, iface := range res.Interfaces {
			iface["name"] = os.Getenv("CNI_IFNAME")
		}
		json.NewEncoder(os.Stdout).Encode(res)
	default:
		fail(4, "unknown CNI_COMMAND")
	}
}
