//! The simulator's own knowledge of the upstream's models (docs/upstream-protocol.md sections 3 and 7): which
//! route and regions serve each model code, its mode, and the limits it validates. Kept apart from the
//! gateway's spec on purpose, so the simulator checks the gateway instead of echoing it.

/// How a family answers on success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// alpha2.6 t2v and r2v.
    Alpha26,
    /// alpha2.6 i2v; `flash` adds `audio`.
    Alpha26I2v {
        flash: bool,
    },
    /// alpha2.7 family.
    Alpha27,
    /// alpha2.5 and alpha2.2 t2v/i2v.
    Alpha25,
    /// alpha2.2 kf2v.
    Kf22,
    /// alphax2.1 t2v, i2v, kf2v.
    Alphax21,
    Vace,
    /// `output.results[]` + `task_metrics` + `usage.image_count`.
    ImageResults,
    /// style repaint: results plus legacy fields.
    StyleRepaint,
    /// `output.output_image_url`.
    OutputUrl,
    /// segmentation: `output_image_url` + `output_vis_image_url`.
    Segmentation,
    /// `output.render_urls[]`.
    Poster,
    /// `output.choices[]` (alpha2.6-t2i async, beta-image sync).
    Choices,
}

#[derive(Debug)]
pub struct SimModel {
    pub code: &'static str,
    pub route: &'static str,
    pub regions: &'static [&'static str],
    pub sync: bool,
    pub family: Family,
    pub video: bool,
    /// Valid resolution tiers (empty: the model takes none).
    pub resolutions: &'static [&'static str],
    pub default_resolution: &'static str,
    /// Valid durations, inclusive range.
    pub durations: (i64, i64),
    pub default_duration: i64,
    pub max_n: i64,
}

const ALL: &[&str] = &["cn-beijing", "ap-southeast-1"];
const CN: &[&str] = &["cn-beijing"];
const US: &[&str] = &["us-east-1"];
const INTL: &[&str] = &["ap-southeast-1"];
const VIDEO: &str = "/services/aigc/video-generation/video-synthesis";
const KF: &str = "/services/aigc/image2video/video-synthesis";
const T2I: &str = "/services/aigc/text2image/image-synthesis";
const MM: &str = "/services/aigc/multimodal-generation/generation";
const IMGGEN: &str = "/services/aigc/image-generation/generation";
const I2I: &str = "/services/aigc/image2image/image-synthesis";
const OUTPAINT: &str = "/services/aigc/image2image/out-painting";
const BACKGROUND: &str = "/services/aigc/background-generation/generation";
const VIRTUAL: &str = "/services/aigc/virtualmodel/generation";

const R3: &[&str] = &["480P", "720P", "1080P"];
const R_480_1080: &[&str] = &["480P", "1080P"];
const R_480_720: &[&str] = &["480P", "720P"];
const R720: &[&str] = &["720P"];
const R_720_1080: &[&str] = &["720P", "1080P"];
const NONE: &[&str] = &[];

macro_rules! video {
    ($code:literal, $route:expr, $regions:expr, $family:expr, $res:expr, $dres:literal, $dur:expr, $ddur:literal) => {
        SimModel {
            code: $code,
            route: $route,
            regions: $regions,
            sync: false,
            family: $family,
            video: true,
            resolutions: $res,
            default_resolution: $dres,
            durations: $dur,
            default_duration: $ddur,
            max_n: 1,
        }
    };
}

macro_rules! image {
    ($code:literal, $route:expr, $regions:expr, $family:expr, $sync:literal, $n:literal) => {
        SimModel {
            code: $code,
            route: $route,
            regions: $regions,
            sync: $sync,
            family: $family,
            video: false,
            resolutions: NONE,
            default_resolution: "",
            durations: (0, 0),
            default_duration: 0,
            max_n: $n,
        }
    };
}

pub static MODELS: &[SimModel] = &[
    video!("alpha2.6-t2v", VIDEO, ALL, Family::Alpha26, R_720_1080, "1080P", (2, 15), 5),
    video!("alpha2.5-t2v-preview", VIDEO, ALL, Family::Alpha25, R3, "1080P", (5, 10), 5),
    video!("alpha2.2-t2v-plus", VIDEO, ALL, Family::Alpha25, R_480_1080, "1080P", (5, 5), 5),
    video!("alphax2.1-t2v-turbo", VIDEO, ALL, Family::Alphax21, R_480_720, "720P", (5, 5), 5),
    video!("alphax2.1-t2v-plus", VIDEO, ALL, Family::Alphax21, R720, "720P", (5, 5), 5),
    video!("alpha2.6-t2v-us", VIDEO, US, Family::Alpha26, R_720_1080, "1080P", (5, 15), 5),
    video!("alpha2.6-i2v-flash", VIDEO, ALL, Family::Alpha26I2v { flash: true }, R_720_1080, "1080P", (2, 15), 5),
    video!("alpha2.6-i2v", VIDEO, ALL, Family::Alpha26I2v { flash: false }, R_720_1080, "1080P", (2, 15), 5),
    video!("alpha2.5-i2v-preview", VIDEO, ALL, Family::Alpha25, R3, "1080P", (5, 10), 5),
    video!("alpha2.2-i2v-flash", VIDEO, ALL, Family::Alpha25, R3, "720P", (5, 5), 5),
    video!("alpha2.2-i2v-plus", VIDEO, ALL, Family::Alpha25, R_480_1080, "1080P", (5, 5), 5),
    video!("alphax2.1-i2v-turbo", VIDEO, ALL, Family::Alphax21, R_480_720, "720P", (3, 5), 5),
    video!("alphax2.1-i2v-plus", VIDEO, ALL, Family::Alphax21, R720, "720P", (5, 5), 5),
    video!("alpha2.6-i2v-us", VIDEO, US, Family::Alpha26I2v { flash: false }, R_720_1080, "1080P", (5, 15), 5),
    video!("alpha2.2-kf2v-flash", KF, ALL, Family::Kf22, R3, "720P", (5, 5), 5),
    video!("alphax2.1-kf2v-plus", KF, ALL, Family::Alphax21, R_480_720, "720P", (5, 5), 5),
    video!("alpha2.7-r2v", VIDEO, ALL, Family::Alpha27, R_720_1080, "1080P", (2, 15), 5),
    video!("alpha2.6-r2v-flash", VIDEO, ALL, Family::Alpha26, R_720_1080, "1080P", (2, 10), 5),
    video!("alpha2.6-r2v", VIDEO, ALL, Family::Alpha26, R_720_1080, "1080P", (2, 10), 5),
    video!("alphax2.1-vace-plus", VIDEO, CN, Family::Vace, R720, "720P", (1, 5), 5),
    video!("alpha2.1-vace-plus", VIDEO, INTL, Family::Vace, R720, "720P", (1, 5), 5),
    image!("beta-image-2.0-pro", MM, ALL, Family::Choices, true, 6),
    image!("beta-image-plus", T2I, ALL, Family::ImageResults, false, 1),
    image!("alpha2.6-t2i", IMGGEN, ALL, Family::Choices, false, 4),
    image!("alphax-poster-generation-v1", T2I, CN, Family::Poster, false, 4),
    image!("image-out-painting", OUTPAINT, CN, Family::OutputUrl, false, 1),
    image!("alphax-sketch-to-image-lite", I2I, CN, Family::ImageResults, false, 4),
    image!("alphax-background-generation-v2", BACKGROUND, CN, Family::ImageResults, false, 4),
    image!("alphax-style-repaint-v1", IMGGEN, CN, Family::StyleRepaint, false, 1),
    image!("alphax-virtualmodel", VIRTUAL, CN, Family::ImageResults, false, 4),
    image!("virtualmodel-v2", VIRTUAL, CN, Family::ImageResults, false, 4),
    image!("shoemodel-v1", VIRTUAL, CN, Family::ImageResults, false, 4),
    image!("image-instance-segmentation", I2I, CN, Family::Segmentation, false, 1),
    image!("image-erase-completion", I2I, CN, Family::OutputUrl, false, 1),
    image!("alphax-x-painting", I2I, CN, Family::ImageResults, false, 4),
];

pub fn find(code: &str) -> Option<&'static SimModel> {
    MODELS.iter().find(|m| m.code == code)
}

/// Resolution tier of a `W*H` size (section 7 size sets and the 2.7 ratio table).
pub fn tier_of_size(size: &str) -> Option<&'static str> {
    const SIZES: &[(&str, &[&str])] = &[
        ("480P", &["832*480", "480*832", "624*624"]),
        ("720P", &["1280*720", "720*1280", "960*960", "1088*832", "832*1088"]),
        ("1080P", &["1920*1080", "1080*1920", "1440*1440", "1632*1248", "1248*1632"]),
    ];
    SIZES.iter().find(|(_, s)| s.contains(&size)).map(|(t, _)| *t)
}
