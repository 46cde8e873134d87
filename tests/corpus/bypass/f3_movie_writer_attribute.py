# rule: blocked_attribute
# marker: pwned_f3_writer_attr
# Family 3: a matplotlib movie writer's argv set on the instance.
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.animation import FFMpegWriter, FuncAnimation

writer = FFMpegWriter()
writer._args = lambda: ["sh", "-c", "echo ran > pwned_f3_writer_attr; cat > /dev/null"]
fig = plt.figure()
animation = FuncAnimation(fig, lambda i: [], frames=1)
try:
    animation.save("out.mp4", writer=writer)
except Exception:
    pass
