"""One bench in this process: the call checked and prepared (prepare), its caches made cold
(coldcache), the host timed with the host's load and thread pools read around it (local,
hostload, threadpools), its memory and profile modes (memory, profile), and the run history
its CI learns from (runhistory). The GPU backends it hands a call to live in kbench.backends."""
