#!/usr/bin/env bash
# Makes the simulator's result videos: H.264 in MP4, one frame a second, for each aspect it answers and each
# whole duration from 1 to 15 s. They are committed; run this again only to change them. Needs an ffmpeg
# with libx264 and drawtext (`pip install imageio-ffmpeg` ships one: FFMPEG=$(python -c 'import
# imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())')).
set -euo pipefail
cd "$(dirname "$0")"
ffmpeg=${FFMPEG:-ffmpeg}
for aspect in 16x9:192x108 9x16:108x192 1x1:144x144 4x3:176x132 3x4:132x176; do
  name=${aspect%%:*} size=${aspect#*:}
  for seconds in $(seq 1 15); do
    "$ffmpeg" -hide_banner -loglevel error -y -f lavfi -i "color=c=0x2456d6:s=$size:r=1:d=$seconds" \
      -vf "drawtext=text='mediagate %{eif\:t+1\:d}/$seconds s':fontcolor=white:fontsize=12:x=(w-tw)/2:y=(h-th)/2" \
      -c:v libx264 -preset veryslow -pix_fmt yuv420p -movflags +faststart -map_metadata -1 -fflags +bitexact \
      "$name-${seconds}s.mp4"
  done
done
