# rule: config_key
# marker: pwned_f3_mpl
# Family 3: a plotting library's configured external program: the movie
# encoder's path is set to a shell, which runs ./rawvideo as a script.
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import animation

with open("rawvideo", "w") as f:
    f.write("echo ran > pwned_f3_mpl\n")
matplotlib.rcParams["animation." + "ffmpeg_path"] = "/bin/sh"
fig = plt.figure()
anim = animation.FuncAnimation(fig, lambda i: [], frames=1)
try:
    anim.save("out.mp4", writer="ffmpeg")
except Exception:
    pass
