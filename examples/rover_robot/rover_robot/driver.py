"""Stand-in for the rover's own ROS 2 stack: the action and services its skill set maps to.

A real rover ships these (a navigation action, a light service, a docking service); this one only
pretends to move so that the example runs on any machine. Start it in the rover's namespace::

    python -m rover_robot.driver --ros-args -r __ns:=/rover_1

* action ``drive`` (``test_msgs/action/Fibonacci``): drives ``order`` steps of ``step_period`` s each,
  one feedback per step; a cancel stops it between steps (the result then holds the steps done);
  more than ``max_steps`` steps are rejected;
* service ``light`` (``std_srvs/srv/SetBool``): switches the light;
* service ``dock`` (``std_srvs/srv/Trigger``): fails with a message while the light is on.
"""

from __future__ import annotations

import time

import rclpy
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from std_srvs.srv import SetBool, Trigger
from test_msgs.action import Fibonacci


class RoverDriver(Node):
    def __init__(self) -> None:
        super().__init__("rover_driver")
        self.step_period = float(self.declare_parameter("step_period", 0.3).value)
        self.max_steps = int(self.declare_parameter("max_steps", 10).value)
        self.light = False
        self.odometry = 0
        group = ReentrantCallbackGroup()  # a cancel must be handled while a goal executes
        ActionServer(
            self,
            Fibonacci,
            "drive",
            self._drive,
            goal_callback=self._accept,
            cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=group,
        )
        self.create_service(SetBool, "light", self._light, callback_group=group)
        self.create_service(Trigger, "dock", self._dock, callback_group=group)
        self.get_logger().info(f"rover driver ready in {self.get_namespace()}: drive, light, dock")

    def _accept(self, goal: Fibonacci.Goal) -> GoalResponse:
        if not 1 <= goal.order <= self.max_steps:
            self.get_logger().warning(f"rejecting drive of {goal.order} steps (1..{self.max_steps})")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _drive(self, handle) -> Fibonacci.Result:
        result = Fibonacci.Result()
        for _ in range(handle.request.order):
            if handle.is_cancel_requested:
                handle.canceled()
                self.get_logger().info(f"drive cancelled after {len(result.sequence)} step(s)")
                return result
            time.sleep(self.step_period)
            self.odometry += 1
            result.sequence.append(self.odometry)
            handle.publish_feedback(Fibonacci.Feedback(sequence=list(result.sequence)))
        handle.succeed()
        self.get_logger().info(f"drove {handle.request.order} step(s); odometry {self.odometry}")
        return result

    def _light(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self.light = bool(request.data)
        response.success, response.message = True, f"light {'on' if self.light else 'off'}"
        self.get_logger().info(response.message)
        return response

    def _dock(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self.light:
            response.success, response.message = False, "cannot dock with the light on"
        else:
            response.success, response.message = True, "docked"
        return response


def main() -> None:
    rclpy.init()
    node = RoverDriver()
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
