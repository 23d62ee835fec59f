#!/usr/bin/env bash
# The compiler launcher of the CUDA attention kernels (kernels/attention/cuda/CMakeLists.txt): runs
# the compile command it is given and drops ptxas's advisory notes on wgmma pipelining, which it
# prints for the SageBwd kernels even without -v ("ptxas info : (C7513) Potential Performance Loss: ...",
# "(C7519) warpgroup.arrive is injected ..."; some forty lines a build). Everything else the
# compiler prints passes through, on stderr; the exit status is the compiler's. The flags, and so
# the generated code, are the same with or without it; configure with -DABLATE_PTXAS_ADVISORIES=ON
# to see the notes (kernel work).
"$@" 2>&1 | grep -v -E '^ptxas info +: \(C75(13|19)\)' >&2
exit "${PIPESTATUS[0]}"
