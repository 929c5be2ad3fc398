"""The ``ros2`` protocol: endpoints that are real ROS 2 nodes (rclpy on the ROS 2 wheels' middleware, Fast DDS).

Owns the ROS 2 side of roughnet: the endpoint program (``roughnet.ros2.endpoint``: the same
configuration in and the same JSON lines out as roughnet-agent, docs/agent-protocol.md), the
message carried (``std_msgs/msg/UInt8MultiArray``, built and read as its serialized CDR bytes in
``roughnet.ros2.wire``), the QoS the knobs name (``roughnet.ros2.qos``) and the environment the
endpoint is started with (``launch``).  It does not own the runner's order of things
(``roughnet.run.agents`` starts an endpoint where it would start an agent) nor the spec's knob table
(``roughnet.spec.knobs``).
"""
