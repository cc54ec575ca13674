"""`horovod.common` under overlap's Horovod alias (overlap/horovod_alias.py): a package, so that
`horovod.common.elastic` and `horovod.common.exceptions` import (the alias maps those to
overlap.elastic and overlap.common themselves). Its names are overlap.common's own objects."""

from overlap.common import *  # noqa: F401,F403
from overlap.common import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
