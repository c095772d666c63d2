"""The public API of ``lmserde.testing``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .adapter_kit import ADAPTER_TIMEOUT_SECONDS as ADAPTER_TIMEOUT_SECONDS
from .adapter_kit import L2AdapterConformance as L2AdapterConformance
from .adapter_kit import adapter_key as adapter_key
from .golden import check_golden_objects as check_golden_objects
from .golden import write_golden_objects as write_golden_objects
from .golden_case import DEFAULT_GOLDEN_KEY as DEFAULT_GOLDEN_KEY
from .golden_case import KEY_DIR as KEY_DIR
from .golden_case import GoldenCase as GoldenCase
from .golden_case import GoldenObjectError as GoldenObjectError
from .golden_tier import GOLDEN_TIMEOUT_SECONDS as GOLDEN_TIMEOUT_SECONDS
from .kit import DEFAULT_KV_LAYOUTS as DEFAULT_KV_LAYOUTS
from .kit import DEFAULT_LAYOUTS as DEFAULT_LAYOUTS
from .kit import TIMEOUT_SECONDS as TIMEOUT_SECONDS
from .kit import MultiSerdeConformance as MultiSerdeConformance
from .kit import SerdeConformance as SerdeConformance
from .kit import random_object as random_object
from .kit import wait_for_result as wait_for_result
from .loopback_server import LOOPBACK_HOST as LOOPBACK_HOST
from .loopback_server import LoopbackChildServer as LoopbackChildServer
from .loopback_server import free_loopback_port as free_loopback_port
from .loopback_server import kill_child as kill_child
from .loopback_server import log_tail as log_tail
from .loopback_server import start_child as start_child
from .loopback_server import stop_child as stop_child
from .loopback_server import wait_until as wait_until
from .moto_server import TEST_CREDENTIALS as TEST_CREDENTIALS
from .moto_server import LocalMotoServer as LocalMotoServer
from .moto_server import MotoNotInstalledError as MotoNotInstalledError
from .moto_server import use_test_aws_environment as use_test_aws_environment
from .slow_network import TimedTask as TimedTask
from .slow_network import TrickleProxy as TrickleProxy
from .slow_network import frozen_process as frozen_process
from .slow_network import timed_task as timed_task
from .slow_network import wait_until_idle as wait_until_idle
