#!/usr/bin/env python3
"""The synthetic text-line images of tests/field/ocr_lines/ (issue 28): random robot
commands in the DejaVu fonts of the host (Debian `fonts-dejavu-core`), one to four lines,
black on white, converted to 8-bit gray. `lines_NN.png` is image NN of this seeded
sequence; the committed ones are those whose recognition changed with the width-bucket
padding before it was masked, and a few others.

    python3 families/ocr/golden/make_lines.py OUT_DIR
"""
import sys
import glob
import random
from PIL import Image, ImageDraw, ImageFont
random.seed(7)
words = "robot stop door battery left right wait table charging station blue red green floor two the a of and slowly quickly turn level camera arm gripper 87% (charging) then me for at must near over lazy fox jumps while waits, done. Move 12.5cm! ok? path-planner x=3 y=-4 speed:0.8m/s".split()
fonts = sorted(glob.glob("/usr/share/fonts/truetype/dejavu/*.ttf"))
for i in range(40):
    f = ImageFont.truetype(random.choice(fonts), random.choice([18,22,26,30,36]))
    lines = [" ".join(random.choice(words) for _ in range(random.randint(2,14))) for _ in range(random.randint(1,4))]
    W = max(int(f.getlength(l)) for l in lines) + 40
    H = len(lines)*int(f.size*1.8)+30
    im = Image.new("RGB",(W,H),"white"); d = ImageDraw.Draw(im)
    for k,l in enumerate(lines): d.text((20, 15+k*int(f.size*1.8)), l, font=f, fill="black")
    im.convert("L").save(f"{sys.argv[1]}/lines_{i:02d}.png", optimize=True)
