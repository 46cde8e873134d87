# rule: process_spawn
# marker: pwned_f3_asyncio
# Family 3: a private asyncio transport class whose constructor starts a shell.
import asyncio
from asyncio import unix_events

async def main():
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    t = unix_events._UnixSubprocessTransport(
        loop, asyncio.SubprocessProtocol(), "echo ran > pwned_f3_asyncio", True,
        None, None, None, 0, waiter=waiter)
    await waiter
    await t._wait()

asyncio.run(main())
