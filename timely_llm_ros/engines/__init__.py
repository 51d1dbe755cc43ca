"""LLM engines behind one small interface, the engine port :mod:`timely_llm_ros.core.engine`.

What is here: the simulated engine on a virtual clock (:mod:`.sim`; on the wall clock
:mod:`.sim_realtime`), llama.cpp embedded on the CPU (:mod:`.llamacpp`, the default), vLLM on a GPU
(:mod:`.vllm`), inference servers over their OpenAI-compatible API (:mod:`.openai`), each with its
options in one dataclass (``*_config``), replica sets of any of them (:mod:`.replicas`), and the
registry that maps an engine name to its class
(:mod:`.registry`, the one list of engine names). :mod:`.base` is the documented shim that external
engine plug-ins import the port from.

This face lists the public API, grouped by the module that defines each name, and imports a module
only when one of its names is first read (:mod:`timely_llm_ros.core.face`): importing this package
never imports an inference library, and each engine module imports its own lazily too.
"""

from timely_llm_ros.core.face import lazy_face

_HOMES: dict[str, tuple[str, ...]] = {
    "timely_llm_ros.engines.registry": (
        "ENGINES",
        "BackendMissing",
        "available_engines",
        "create_engine",
        "engine_class",
    ),
    "timely_llm_ros.engines.sim": ("SimEngine",),
    "timely_llm_ros.engines.sim_realtime": ("RealtimeSimEngine",),
    "timely_llm_ros.engines.replicas": ("ReplicaSetEngine", "simulated_replicas"),
    "timely_llm_ros.engines.llamacpp": ("LlamaCppEngine",),
    "timely_llm_ros.engines.llamacpp_config": ("LlamaCppConfig",),
    "timely_llm_ros.engines.vllm": ("VllmEngine",),
    "timely_llm_ros.engines.vllm_config": ("VllmConfig",),
    "timely_llm_ros.engines.openai": ("OpenAIEngine",),
    "timely_llm_ros.engines.openai_config": ("OpenAIConfig",),
}
__all__, __getattr__, __dir__ = lazy_face(__name__, _HOMES)
