//! Result files the simulator serves itself, under signed-looking URLs that expire after 24 hours.

use sha2::{Digest, Sha256};
use std::sync::OnceLock;

pub const TTL_SECONDS: i64 = 24 * 3600;
const SECRET: &str = "mediagate-simulator-signing";

pub fn signature(path: &str, expires: i64) -> String {
    hex::encode(&Sha256::digest(format!("{SECRET}\n{path}\n{expires}"))[..16])
}

/// `{base}/files/{name}?Expires=..&Signature=..`.
pub fn signed_url(base: &str, name: &str, now_s: i64) -> String {
    let expires = now_s + TTL_SECONDS;
    format!("{base}/files/{name}?Expires={expires}&Signature={}", signature(name, expires))
}

/// A real 64x64 RGB PNG (a gradient), encoded once.
pub fn png() -> &'static [u8] {
    static PNG: OnceLock<Vec<u8>> = OnceLock::new();
    PNG.get_or_init(|| {
        let (w, h) = (64u32, 64u32);
        let mut pixels = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                pixels.extend_from_slice(&[(x * 4) as u8, (y * 4) as u8, 160]);
            }
        }
        let mut out = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut out, w, h);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            if let Ok(mut writer) = encoder.write_header() {
                let _ = writer.write_image_data(&pixels);
            }
        }
        out
    })
}

/// The result videos (`videos/make.sh`): H.264 in MP4, one per aspect and whole duration, a few KB each.
macro_rules! durations {
    ($aspect:literal) => {
        [
            include_bytes!(concat!("videos/", $aspect, "-1s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-2s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-3s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-4s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-5s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-6s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-7s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-8s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-9s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-10s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-11s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-12s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-13s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-14s.mp4")).as_slice(),
            include_bytes!(concat!("videos/", $aspect, "-15s.mp4")).as_slice(),
        ]
    };
}

/// `(name, width / height, a video per second of length from 1 s)`.
static VIDEOS: [(&str, f64, [&[u8]; 15]); 5] = [
    ("16x9", 16.0 / 9.0, durations!("16x9")),
    ("9x16", 9.0 / 16.0, durations!("9x16")),
    ("1x1", 1.0, durations!("1x1")),
    ("4x3", 4.0 / 3.0, durations!("4x3")),
    ("3x4", 3.0 / 4.0, durations!("3x4")),
];

/// The name of the video file a job of `seconds` at `width / height` gets: the aspect nearest it and the
/// length rounded into 1-15 s, which [`video`] serves.
pub fn video_name(stem: &str, aspect: f64, seconds: f64) -> String {
    let nearest = VIDEOS
        .iter()
        .min_by(|a, b| (a.1.ln() - aspect.ln()).abs().total_cmp(&(b.1.ln() - aspect.ln()).abs()))
        .map_or("16x9", |v| v.0);
    let seconds = if seconds.is_finite() { seconds.round().clamp(1.0, 15.0) as usize } else { 5 };
    format!("{stem}-{nearest}-{seconds}s.mp4")
}

/// The bytes of a video file [`video_name`] named (a 5 s 16:9 video for any other name).
pub fn video(name: &str) -> &'static [u8] {
    let parsed = name.strip_suffix("s.mp4").and_then(|rest| {
        let (rest, seconds) = rest.rsplit_once('-')?;
        let (_, aspect) = rest.rsplit_once('-')?;
        let seconds: usize = seconds.parse().ok().filter(|s| (1..=15).contains(s))?;
        VIDEOS.iter().find(|v| v.0 == aspect).map(|v| v.2[seconds - 1])
    });
    parsed.unwrap_or(VIDEOS[0].2[4])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_video_has_the_aspect_nearest_the_request_and_its_length() {
        assert_eq!(video_name("t-0", 1920.0 / 1080.0, 5.0), "t-0-16x9-5s.mp4");
        assert_eq!(video_name("t-0", 720.0 / 1280.0, 10.4), "t-0-9x16-10s.mp4");
        assert_eq!(video_name("t-0", 1088.0 / 832.0, 30.0), "t-0-4x3-15s.mp4");
        assert_eq!(video_name("t-0", 1.0, 0.2), "t-0-1x1-1s.mp4");
        assert_eq!(video_name("t-0", 1.0, f64::NAN), "t-0-1x1-5s.mp4");
        for name in ["t-0-9x16-10s.mp4", "t-0-3x4-1s.mp4", "other.mp4", "t-0-16x9-99s.mp4"] {
            let bytes = video(name);
            assert_eq!(&bytes[4..8], b"ftyp", "{name}");
        }
        assert_ne!(video("t-0-9x16-10s.mp4"), video("t-0-16x9-5s.mp4"));
    }
}
