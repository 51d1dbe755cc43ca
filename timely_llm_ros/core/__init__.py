"""Pure-Python TimelyLLM core: TUF, PUD priorities, scheduler, segmenter, execution-time
models and metrics. Nothing in this package imports ROS, so the same code drives the
simulator, the real engines and the ROS nodes, and can be tested on a virtual clock."""
