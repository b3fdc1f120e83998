package workspace_test

const crashEnv = "CUSTODY_WORKSPACE_CRASH"

func crashChild() int { return 2 }
