"""The GPU backends' Python side: adapting a call to kbench._core's CUDA (cuda, with what its
raw record means in cuda_report) and HIP (hip) measurements."""
