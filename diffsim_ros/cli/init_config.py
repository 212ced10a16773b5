"""``diffsim-ros init``: a complete, commented robot config from a URDF (and a bag).

    diffsim-ros init --urdf URDF [--base LINK --tip LINK] [--bag BAG]
        [--controller-joints J1,J2,... | --controllers controllers.yaml] [--name NAME] --out robot.yaml [--force]

The chain comes from the URDF (base and tip proposed when not given; an ambiguous chain is an
error listing the candidate tips), the joint-state and command topics and their types from the
bag, and the order of a Float64MultiArray command (which carries no names) from
``--controller-joints`` or the ros2_control controllers YAML (``--controllers``); a
JointCommand names its joints. The config is validated by loading it, building the model and
reading the bag with it before it is written; what was assumed is printed.

Exit codes (:mod:`diffsim_ros.cli.exits`): 0 written; 2 bad input (named; nothing written).
"""

import sys
from pathlib import Path

from diffsim_ros.cli import exits, summary

__all__ = ["add_parser", "init_command"]

PROG = "diffsim-ros init"


def add_parser(subparsers):
    """Register the ``init`` subcommand."""
    parser = subparsers.add_parser("init", help=summary("init"), description=__doc__.split("\n\n")[0])
    parser.add_argument("--urdf", required=True, type=Path, help="the arm's URDF")
    parser.add_argument("--base", default=None, metavar="LINK", help="link fixed to the world (default: the URDF's root)")
    parser.add_argument("--tip", default=None, metavar="LINK",
                        help="last link of the chain (default: the end of the serial chain of movable joints)")
    parser.add_argument("--bag", default=None, type=Path, help="a recording of the arm: its topics go into the config")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--controller-joints", default=None, metavar="J1,J2,...",
                       help="the effort controller's joints in its order (its Float64MultiArray commands)")
    order.add_argument("--controllers", default=None, type=Path, metavar="YAML",
                       help="ros2_control controllers YAML: the command topic's controller's joints")
    parser.add_argument("--joint-states", default=None, metavar="TOPIC", help="the joint-state topic, among several")
    parser.add_argument("--commands", default=None, metavar="TOPIC", help="the command topic, among several")
    parser.add_argument("--name", default=None, help="robot name (default: the URDF's)")
    parser.add_argument("--out", required=True, type=Path, help="the robot config to write (robot.yaml)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.set_defaults(handler=init_command)


def _controller_joints(args, chain, streams):
    """The command's joint order (None: chain order, no Float64MultiArray), and a note."""
    from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY
    from diffsim_ros.pipelines.robot_setup import check_controller_joints, controllers_joints

    topic = streams.commanded_torques if streams else None
    if args.controller_joints is not None:
        names = [name.strip() for name in args.controller_joints.split(",") if name.strip()]
        return check_controller_joints(chain, names), "controller_joints from --controller-joints"
    if args.controllers is not None:
        names = controllers_joints(args.controllers, topic)
        return check_controller_joints(chain, names), f"controller_joints from {args.controllers}"
    if streams and streams.command_type == FLOAT64_MULTI_ARRAY:
        raise ValueError(f"the commands on {topic} are std_msgs/msg/Float64MultiArray, which name no joints: give "
                         "their order with --controller-joints J1,J2,... or --controllers controllers.yaml")
    return None, None


def _print_assumptions(chain, streams, notes, config, out):
    print(f"wrote {out}: {config.name}, {len(chain.joints)} joints {list(chain.joints)}, "
          f"{chain.base_link} -> {chain.tip_link}")
    for note in chain.notes + (streams.notes if streams else []) + notes:
        print(f"assumed: {note}")
    if streams:
        command = f", commands {streams.commanded_torques} ({streams.command_type})" if streams.commanded_torques else ""
        print(f"topics: joint states {streams.joint_states} (about {streams.rate:.3g} Hz){command}")
        if streams.camera_topics:
            print(f"note: PoseStamped topics {list(streams.camera_topics)} are not configured: set topics.camera_pose "
                  "and camera.tracked_frame to use one")


def init_command(args):
    """Handler: returns the exit code."""
    from diffsim_ros.io.bags import BagError
    from diffsim_ros.model import RobotModelError
    from diffsim_ros.outputs import OutputPathError, check_output_path
    from diffsim_ros.pipelines.robot_setup import bag_streams, config_text, propose_chain, write_config

    try:
        check_output_path(args.out, force=args.force, what="robot config")
        chain = propose_chain(args.urdf, args.base, args.tip)
        streams = None if args.bag is None else bag_streams(args.bag, chain.joints, args.joint_states, args.commands)
        if args.bag is None and (args.joint_states or args.commands):
            raise ValueError("--joint-states and --commands choose among a bag's topics: give --bag")
        controller_joints, note = _controller_joints(args, chain, streams)
        source = f" from {args.urdf}" + (f" and {args.bag}" if args.bag else "")
        text = config_text(chain, args.out, args.name, streams, controller_joints, source)
        config, _ = write_config(text, args.out, args.bag)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        return exits.INTERRUPTED
    except (BagError, RobotModelError, OutputPathError, FileExistsError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    _print_assumptions(chain, streams, [note] if note else [], config, args.out)
    return exits.OK
