package main

import (
	"strconv"
	"testing"
)

const mountinfo = `22 1 0:20 / /newroot rw,relatime - rootfs rootfs rw
23 22 0:21 / /newroot/tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=8192k
24 22 0:22 / /newroot/proc rw,nosuid,nodev,noexec - proc proc rw
25 1 0:5 / /dev rw - devtmpfs devtmpfs rw
`

func TestParseStageStatus(t *testing.T) {
	ok := "mountinfo " + strconv.Itoa(len(mountinfo)) + "\n" + mountinfo + "ready 2 1 3.14 3.20\n"
	st, err := parseStageStatus([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if st.seccomp != 2 || st.noNewPrivs != 1 || st.entered != 3.14 || st.ready != 3.20 || st.setupErr != "" || st.execErr != "" {
		t.Errorf("parsed %+v", st)
	}
	mounts := rootMounts(st.mountinfo)
	if len(mounts) != 3 || mounts[0].Target != "/" || mounts[1].Target != "/tmp" || mounts[1].FSType != "tmpfs" || mounts[2].Target != "/proc" {
		t.Errorf("mounts %+v", mounts)
	}

	// A failure before the ready line is the setup's; after it, the exec's.
	st, err = parseStageStatus([]byte("mountinfo 0\nerror chroot /newroot: no such file or directory\n"))
	if err != nil || st.setupErr != "chroot /newroot: no such file or directory" || st.execErr != "" {
		t.Errorf("setup failure: %+v %v", st, err)
	}
	st, err = parseStageStatus([]byte(ok + "error exec /bin/nope: no such file or directory\n"))
	if err != nil || st.execErr != "exec /bin/nope: no such file or directory" || st.setupErr != "" {
		t.Errorf("exec failure: %+v %v", st, err)
	}

	for name, bad := range map[string]string{
		"empty (the stage died silently)": "",
		"no ready line":                   "mountinfo 0\n",
		"truncated line":                  "mountinfo 0\nready 2 1",
		"mountinfo longer than the rest":  "mountinfo 999\nready 2 1 1 1\n",
		"negative mountinfo":              "mountinfo -1\nready 2 1 1 1\n",
		"malformed ready":                 "mountinfo 0\nready two 1 1 1\n",
		"unknown line":                    "mountinfo 0\nhello\nready 2 1 1 1\n",
		"a second ready line":             "ready 2 1 1 1\nready 2 1 1 1\n",
	} {
		if st, err := parseStageStatus([]byte(bad)); err == nil {
			t.Errorf("%s: accepted as %+v", name, st)
		}
	}
}
