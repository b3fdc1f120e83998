#include "textflag.h"

// func outsb(port uint16, p []byte)
TEXT ·outsb(SB), NOSPLIT, $0-32
	MOVW port+0(FP), DX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	CLD
	REP; OUTSB
	RET
