"""timely_llm_ros: TimelyLLM segmented, time-utility-aware LLM planning for ROS 2 robot fleets.

The ROS interface build (CMake/rosidl) installs the generated message modules
(`timely_llm_ros.msg`, `timely_llm_ros.srv`) into the install prefix, while the
hand-written modules may be imported straight from a source checkout. Extending
``__path__`` lets both halves of the package be found whichever copy is imported first.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
