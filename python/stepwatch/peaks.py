"""stepwatch.peaks — the dense peak FLOP/s of the accelerators people train on, per dtype.

One table, from the vendors' datasheets (each row names its source). Dense figures: where a
datasheet gives only "with sparsity" figures, they are halved, as its footnote says. A device
not in the table, and every CPU, has no peak: MFU is then unknown unless the user gives
``peak_flops=``; stepwatch never prints a guess as a fact.

    peak_for("NVIDIA H100 80GB HBM3", "bf16")  ->  ("H100 SXM", 989.5e12)
"""
import re

__all__ = ["PEAKS", "DTYPES", "match_device", "peak_for"]

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")

T = 1e12

# label -> {dtype: dense FLOP/s}. A dtype the part lacks (V100 and T4 have no bf16 or tf32
# tensor cores, no part before Hopper/Ada has fp8) is absent, never filled in.
PEAKS = {
    # NVIDIA Tesla V100 datasheet (SXM2: 15.7 FP32, 125 tensor; PCIe: 14, 112; V100S PCIe: 16.4, 130)
    "V100 SXM2": {"fp32": 15.7 * T, "fp16": 125 * T},
    "V100 PCIe": {"fp32": 14 * T, "fp16": 112 * T},
    "V100S PCIe": {"fp32": 16.4 * T, "fp16": 130 * T},
    # NVIDIA T4 Tensor Core GPU datasheet: 8.1 TFLOPS FP32, 65 TFLOPS mixed FP16/FP32
    "T4": {"fp32": 8.1 * T, "fp16": 65 * T},
    # NVIDIA A10 datasheet (NVIDIA publishes none for AWS's A10G; its A10 figures are used):
    # FP32 31.2, TF32 62.5, BF16/FP16 125 (dense; 125/250/250 with sparsity)
    "A10G": {"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T},
    "A10": {"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T},
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, FP8 485* (*sparsity: halved)
    "L4": {"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T, "fp8": 242.5 * T},
    # NVIDIA L40S datasheet: FP32 91.6, TF32 366*, BF16/FP16 733*, FP8 1466* (*sparsity: halved)
    "L40S": {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 366.5 * T, "fp16": 366.5 * T,
             "fp8": 733 * T},
    # NVIDIA A100 datasheet (PCIe and SXM alike): FP32 19.5, TF32 156, BF16/FP16 312 (dense)
    "A100 SXM": {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
    "A100 PCIe": {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
    # NVIDIA H100 datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958* (*sparsity)
    "H100 SXM": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                 "fp8": 1979 * T},
    # NVIDIA H100 datasheet, PCIe: FP32 51, TF32 756*, BF16/FP16 1513*, FP8 3026* (*sparsity)
    "H100 PCIe": {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756.5 * T, "fp16": 756.5 * T,
                  "fp8": 1513 * T},
    # NVIDIA H100 datasheet, H100 NVL (per GPU): FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341*
    "H100 NVL": {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T,
                 "fp8": 1670.5 * T},
    # NVIDIA H200 datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958* (*sparsity)
    "H200 SXM": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                 "fp8": 1979 * T},
    # NVIDIA H200 datasheet, NVL: FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341* (*sparsity)
    "H200 NVL": {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T,
                 "fp8": 1670.5 * T},
    # NVIDIA HGX B200 datasheet (8 GPUs: FP32 600 TF, TF32 18 PF*, BF16/FP16 36 PF*,
    # FP8 72 PF*; *sparsity): per GPU, dense
    "B200": {"fp32": 75 * T, "tf32": 1125 * T, "bf16": 2250 * T, "fp16": 2250 * T,
             "fp8": 4500 * T},
    # NVIDIA GB200 NVL72 datasheet (72 GPUs: FP32 5,760 TF, TF32 180 PF*, BF16/FP16 360 PF*,
    # FP8 720 PF*; *sparsity): per GPU, dense
    "GB200": {"fp32": 80 * T, "tf32": 1250 * T, "bf16": 2500 * T, "fp16": 2500 * T,
              "fp8": 5000 * T},
    # ---- workstation and consumer GPUs. GeForce parts run FP16/BF16 tensor math with FP32
    # accumulation (what mixed-precision training uses) at half their FP16-accumulate rate;
    # the figures here are the FP32-accumulate ones. Laptop and Max-Q parts clock lower:
    # match_device leaves them out.
    # NVIDIA L40 datasheet: FP32 90.5, TF32 181*, BF16/FP16 362.1*, FP8 724* (*sparsity: halved)
    "L40": {"fp32": 90.5 * T, "tf32": 90.5 * T, "bf16": 181.05 * T, "fp16": 181.05 * T,
            "fp8": 362 * T},
    # NVIDIA Ada GPU architecture whitepaper (v2.1), appendix: GeForce RTX 4090 FP32 82.6,
    # TF32 82.6, FP16/BF16 with FP32 accumulate 165.2, FP8 with FP32 accumulate 330.3 (dense)
    "RTX 4090": {"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165.2 * T, "fp16": 165.2 * T,
                 "fp8": 330.3 * T},
    # the same whitepaper: GeForce RTX 4080 FP32 48.7, TF32 48.7, FP16/BF16 (FP32 acc.) 97.5,
    # FP8 (FP32 acc.) 194.9 (dense)
    "RTX 4080": {"fp32": 48.7 * T, "tf32": 48.7 * T, "bf16": 97.5 * T, "fp16": 97.5 * T,
                 "fp8": 194.9 * T},
    # NVIDIA Ampere GA102 GPU architecture whitepaper (v2), GeForce RTX 3090: FP32 35.6,
    # TF32 35.6, FP16/BF16 with FP32 accumulate 71 (dense); 3080: 29.8, 29.8, 59.5
    "RTX 3090": {"fp32": 35.6 * T, "tf32": 35.6 * T, "bf16": 71 * T, "fp16": 71 * T},
    "RTX 3080": {"fp32": 29.8 * T, "tf32": 29.8 * T, "bf16": 59.5 * T, "fp16": 59.5 * T},
    # NVIDIA's GeForce RTX 3090 Ti / 3080 Ti / 3070 specifications (CUDA cores x boost clock
    # x 2 for FP32; GA102/GA104 SMs x 512 FLOP/clock for FP16 with FP32 accumulate, the
    # whitepaper's rate): 3090 Ti 40.0 / 80.0, 3080 Ti 34.1 / 68.2, 3070 20.3 / 40.6
    "RTX 3090 Ti": {"fp32": 40 * T, "tf32": 40 * T, "bf16": 80 * T, "fp16": 80 * T},
    "RTX 3080 Ti": {"fp32": 34.1 * T, "tf32": 34.1 * T, "bf16": 68.2 * T, "fp16": 68.2 * T},
    "RTX 3070": {"fp32": 20.3 * T, "tf32": 20.3 * T, "bf16": 40.6 * T, "fp16": 40.6 * T},
    # NVIDIA RTX A6000 datasheet: FP32 38.7, tensor 309.7* (FP16, *sparsity: halved; TF32 half
    # of FP16)
    "RTX A6000": {"fp32": 38.7 * T, "tf32": 77.4 * T, "bf16": 154.8 * T, "fp16": 154.8 * T},
    # NVIDIA A40 datasheet: FP32 37.4, TF32 74.8, BF16/FP16 149.7 (dense; twice with sparsity)
    "A40": {"fp32": 37.4 * T, "tf32": 74.8 * T, "bf16": 149.7 * T, "fp16": 149.7 * T},
    # NVIDIA Turing GPU architecture whitepaper (TU102/TU104, reference clocks): TITAN RTX
    # FP32 16.3, FP16 tensor with FP32 accumulate 130.5; RTX 2080 Ti 13.4 / 53.8; RTX 2080
    # 10.1 / 40.3; Quadro RTX 5000 (datasheet) 11.2 / 89.2. Turing has no BF16 or TF32.
    "TITAN RTX": {"fp32": 16.3 * T, "fp16": 130.5 * T},
    "RTX 2080 Ti": {"fp32": 13.4 * T, "fp16": 53.8 * T},
    "RTX 2080": {"fp32": 10.1 * T, "fp16": 40.3 * T},
    "Quadro RTX 5000": {"fp32": 11.2 * T, "fp16": 89.2 * T},
    # NVIDIA's GeForce RTX 2080 SUPER / 2070 SUPER specifications (CUDA cores x boost clock
    # x 2; TU104 SMs x 512 FLOP/clock for FP16 with FP32 accumulate): 11.2 / 44.6, 9.1 / 36.3
    "RTX 2080 SUPER": {"fp32": 11.2 * T, "fp16": 44.6 * T},
    "RTX 2070 SUPER": {"fp32": 9.1 * T, "fp16": 36.3 * T},
    # AMD Instinct MI250X datasheet: FP32 matrix 95.7, BF16/FP16 383 (no TF32, no FP8)
    "MI250X": {"fp32": 95.7 * T, "bf16": 383 * T, "fp16": 383 * T},
    # AMD Instinct MI300X datasheet: FP32 matrix 163.4, TF32 653.7, BF16/FP16 1307.4,
    # FP8 2614.9 (dense; twice these with sparsity)
    "MI300X": {"fp32": 163.4 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T, "fp16": 1307.4 * T,
               "fp8": 2614.9 * T},
}

# (regular expression on the lowercased device name, label). First match wins, so the more
# specific names come first (gb200 before b200, l40s before l40, h100 nvl before h100, 3090 ti
# before 3090).
# The names are what torch.cuda.get_device_name() and nvidia-smi say: "NVIDIA H100 80GB HBM3"
# is the SXM part, "NVIDIA A100-SXM4-80GB", "Tesla V100-PCIE-32GB", "AMD Instinct MI300X".
_NAMES = (
    (r"\bgb200\b", "GB200"),
    (r"\bb200\b", "B200"),
    (r"\bh200\b.*\bnvl\w*", "H200 NVL"),
    (r"\bh200\b", "H200 SXM"),
    (r"\bh100\b.*\bnvl\w*", "H100 NVL"),
    (r"\bh100\b.*\b(pcie|hbm2e)\b", "H100 PCIe"),  # the PCIe part is the one with HBM2e
    (r"\bh100\b.*\b(sxm\w*|hbm3)\b", "H100 SXM"),
    (r"\ba100\b.*\bpcie\b", "A100 PCIe"),
    (r"\ba100\b.*\bsxm\w*", "A100 SXM"),
    (r"\bl40s\b", "L40S"),
    (r"\bl40\b", "L40"),
    (r"\bl4\b", "L4"),
    (r"\ba10g\b", "A10G"),
    (r"\ba10\b", "A10"),
    (r"\bt4\b", "T4"),
    (r"\bv100s\b.*\bpcie\b", "V100S PCIe"),
    (r"\bv100\b.*\bpcie\b", "V100 PCIe"),
    (r"\bv100\b.*\bsxm\w*", "V100 SXM2"),
    (r"\brtx 4090\b", "RTX 4090"),
    (r"\brtx 4080\b(?! super)", "RTX 4080"),  # the 4080 SUPER is another part
    (r"\brtx 3090 ti\b", "RTX 3090 Ti"),
    (r"\brtx 3090\b", "RTX 3090"),
    (r"\brtx 3080 ti\b", "RTX 3080 Ti"),
    (r"\brtx 3080\b", "RTX 3080"),
    (r"\brtx 3070\b(?! ti)", "RTX 3070"),
    (r"\b(rtx )?a6000\b", "RTX A6000"),
    (r"\ba40\b", "A40"),
    (r"\btitan rtx\b", "TITAN RTX"),
    (r"\brtx 2080 ti\b", "RTX 2080 Ti"),
    (r"\brtx 2080 super\b", "RTX 2080 SUPER"),
    (r"\brtx 2080\b", "RTX 2080"),
    (r"\brtx 2070 super\b", "RTX 2070 SUPER"),
    (r"\bquadro rtx 5000\b", "Quadro RTX 5000"),
    (r"\bmi250x\b", "MI250X"),
    (r"\bmi300x\b", "MI300X"),
)


def match_device(name):
    """The table's label for a device name, or None when the table does not hold it (a
    name that leaves the part open, "NVIDIA H100" alone, is not guessed)."""
    if not isinstance(name, str):
        return None
    text = re.sub(r"[-_]", " ", name.lower())
    if re.search(r"\b(laptop|max q|mobile)\b", text):
        return None  # a mobile part clocks lower than the datasheet's: not guessed
    for pattern, label in _NAMES:
        if re.search(pattern, text):
            return label
    return None


def peak_for(device_name, dtype):
    """(label, dense peak FLOP/s) of device_name in dtype, or (label or None, None) when the
    table has no figure for it."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    label = match_device(device_name)
    if label is None:
        return None, None
    return label, PEAKS[label].get(dtype)
