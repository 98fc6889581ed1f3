"""More organic molecules for the general Hamiltonian model: H/C/N/O SMILES embedded in 3D by RDKit, offline.

ASE's G2 and S22 collections hold about 65 closed-shell H/C/N/O molecules, mostly very small. This list adds 60
common ones that a general model of organic chemistry should have seen: substituted benzenes, five- and six-ring
heteroaromatics, fused rings, carbonyl chemistry (aldehydes, ketones, acids, esters, amides, anhydride, carbamate,
urea), nitriles, oximes, amines, alcohols, ethers, amino acids, a nucleobase and paracetamol. None is an MD17
molecule (malondialdehyde, uracil, aspirin, naphthalene, salicylic acid, toluene; thymine, uracil's 5-methyl
derivative, is left out too) or one of the G2 molecules already listed (:data:`G2_ORGANIC`,
``tests/unit/test_hamiltonian_smiles.py`` checks both by canonical SMILES).

:data:`SMILES_LARGE` is a test set, never trained on: molecules of 10–14 heavy atoms (H/C/N/O/F), larger than any
QM9 molecule, for a size split.

Geometry: RDKit's ETKDG v3 embedding with a fixed seed, then an MMFF94 minimisation (Landrum et al., RDKit;
Riniker & Landrum 2015; Halgren 1996): near-equilibrium starting points like the G2 ones, from which the
generator draws displaced, rotated conformers. Needs ``rdkit`` (``pip install -e ".[quantum]"``).
"""

from __future__ import annotations

import numpy as np

#: name -> SMILES (closed shell, H/C/N/O only)
SMILES_ORGANIC = {
    "benzonitrile": "N#Cc1ccccc1", "aniline": "Nc1ccccc1", "anisole": "COc1ccccc1", "benzaldehyde": "O=Cc1ccccc1",
    "benzoic-acid": "OC(=O)c1ccccc1", "acetophenone": "CC(=O)c1ccccc1", "nitrobenzene": "O=[N+]([O-])c1ccccc1",
    "benzyl-alcohol": "OCc1ccccc1", "hydroquinone": "Oc1ccc(O)cc1", "catechol": "Oc1ccccc1O",
    "4-hydroxypyridine": "Oc1ccncc1", "pyrimidine": "c1cncnc1", "pyridazine": "c1ccnnc1", "imidazole": "c1c[nH]cn1",
    "pyrazole": "c1cc[nH]n1", "oxazole": "c1cocn1", "isoxazole": "c1cnoc1", "triazole": "c1nc[nH]n1",
    "cytosine": "Nc1cc[nH]c(=O)n1", "benzofuran": "c1ccc2occc2c1", "benzimidazole": "c1ccc2[nH]cnc2c1",
    "quinoline": "c1ccc2ncccc2c1", "styrene": "C=Cc1ccccc1", "phenylacetylene": "C#Cc1ccccc1",
    "methyl-benzoate": "COC(=O)c1ccccc1", "paracetamol": "CC(=O)Nc1ccc(O)cc1", "N-methylacetamide": "CNC(C)=O",
    "urea": "NC(N)=O", "formamide": "NC=O", "dimethylformamide": "CN(C)C=O", "glycine": "NCC(=O)O",
    "alanine": "CC(N)C(=O)O", "serine": "NC(CO)C(=O)O", "methyl-acetate": "COC(C)=O", "ethyl-formate": "CCOC=O",
    "acetic-anhydride": "CC(=O)OC(C)=O", "methyl-carbamate": "COC(N)=O", "acrolein": "C=CC=O",
    "acrylic-acid": "C=CC(=O)O", "propanal": "CCC=O", "butanone": "CCC(C)=O", "cyclohexanone": "O=C1CCCCC1",
    "cyclopentanol": "OC1CCCC1", "tetrahydrofuran": "C1CCOC1", "dioxane": "C1COCCO1", "morpholine": "C1COCCN1",
    "piperidine": "C1CCNCC1", "pyrrolidine": "C1CCNC1", "propionitrile": "CCC#N", "malononitrile": "N#CCC#N",
    "acetone-oxime": "CC(C)=NO", "glycolaldehyde": "OCC=O", "lactic-acid": "CC(O)C(=O)O",
    "oxalic-acid": "OC(=O)C(=O)O", "ethylene-glycol": "OCCO", "cyclopentadiene": "C1=CCC=C1",
    "hexatriene": "C=CC=CC=C", "nitroethane": "CC[N+](=O)[O-]", "methyl-isocyanate": "CN=C=O",
    "acetaldehyde-azine": "CC=NN=CC",
}

#: name -> SMILES of 10-14 heavy atoms (H/C/N/O/F, closed shell): larger than every QM9 molecule, the test set of
#: a size split (like QH9-stable-ood; never trained on). Fused and linked rings, drugs and metabolites, amino and
#: carboxylic acids, terpenes, alkanes, and fluorinated aromatics; none in the lists above or the MD17 set.
SMILES_LARGE = {
    "quinoxaline": "c1ccc2nccnc2c1", "quinazoline": "c1ccc2ncncc2c1", "pteridine": "c1cnc2ncncc2n1",
    "azulene": "c1ccc2cccc2cc1", "tetralin": "C1CCc2ccccc2C1", "1-methylnaphthalene": "Cc1cccc2ccccc12",
    "2-naphthol": "Oc1ccc2ccccc2c1", "coumarin": "O=c1ccc2ccccc2o1", "phthalimide": "O=C1NC(=O)c2ccccc21",
    "phthalic-anhydride": "O=C1OC(=O)c2ccccc21", "isatin": "O=C1Nc2ccccc2C1=O", "biphenyl": "c1ccc(-c2ccccc2)cc1",
    "diphenyl-ether": "c1ccc(Oc2ccccc2)cc1", "benzophenone": "O=C(c1ccccc1)c1ccccc1",
    "carbazole": "c1ccc2c(c1)[nH]c1ccccc12", "dibenzofuran": "c1ccc2c(c1)oc1ccccc12",
    "fluorene": "C1c2ccccc2-c2ccccc21", "acridine": "c1ccc2nc3ccccc3cc2c1", "4-nitrophenol": "Oc1ccc([N+](=O)[O-])cc1",
    "acetanilide": "CC(=O)Nc1ccccc1", "cinnamaldehyde": "O=C/C=C/c1ccccc1", "methyl-salicylate": "COC(=O)c1ccccc1O",
    "salicylamide": "NC(=O)c1ccccc1O", "vanillin": "COc1cc(C=O)ccc1O", "eugenol": "C=CCc1ccc(O)c(OC)c1",
    "benzocaine": "CCOC(=O)c1ccc(N)cc1", "dopamine": "NCCc1ccc(O)c(O)c1", "tryptamine": "NCCc1c[nH]c2ccccc12",
    "serotonin": "NCCc1c[nH]c2ccc(O)cc12", "nicotine": "CN1CCC[C@H]1c1cccnc1",
    "ephedrine": "CN[C@@H](C)[C@H](O)c1ccccc1",
    "caffeine": "Cn1cnc2c1c(=O)n(C)c(=O)n2C", "theobromine": "Cn1cnc2c1c(=O)[nH]c(=O)n2C",
    "guanine": "Nc1nc2[nH]cnc2c(=O)[nH]1", "hypoxanthine": "O=c1[nH]cnc2nc[nH]c12",
    "phenylalanine": "N[C@@H](Cc1ccccc1)C(=O)O", "tyrosine": "N[C@@H](Cc1ccc(O)cc1)C(=O)O",
    "histidine": "N[C@@H](Cc1c[nH]cn1)C(=O)O", "glutamic-acid": "N[C@@H](CCC(=O)O)C(=O)O",
    "mandelic-acid": "OC(C(=O)O)c1ccccc1", "hippuric-acid": "OC(=O)CNC(=O)c1ccccc1",
    "citric-acid": "OC(=O)CC(O)(CC(=O)O)C(=O)O", "glucose": "OC[C@H]1O[C@H](O)[C@H](O)[C@@H](O)[C@@H]1O",
    "diethyl-malonate": "CCOC(=O)CC(=O)OCC", "cyclohexyl-acetate": "CC(=O)OC1CCCCC1",
    "menthol": "CC(C)[C@@H]1CC[C@@H](C)C[C@H]1O", "camphor": "CC1(C)C2CCC1(C)C(=O)C2", "decane": "CCCCCCCCCC",
    "tributylamine": "CCCCN(CCCC)CCCC", "deet": "CCN(CC)C(=O)c1cccc(C)c1",
    "trifluorotoluene": "FC(F)(F)c1ccccc1", "2-fluorobenzoic-acid": "OC(=O)c1ccccc1F",
    "4-fluoroacetophenone": "CC(=O)c1ccc(F)cc1", "3,5-difluorobenzoic-acid": "OC(=O)c1cc(F)cc(F)c1",
    "4-fluorobiphenyl": "Fc1ccc(-c2ccccc2)cc1", "pentafluorophenol": "Oc1c(F)c(F)c(F)c(F)c1F",
    "hexafluorobenzene": "Fc1c(F)c(F)c(F)c(F)c1F", "4-fluorophenylpropanoic-acid": "CC(C(=O)O)c1ccc(F)cc1",
}


def smiles_molecule(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers (n,) and positions (n, 3) Å of a listed SMILES molecule (ETKDG v3 + MMFF94).

    ``name`` is a key of :data:`SMILES_ORGANIC` or :data:`SMILES_LARGE`.
    """
    try:
        from rdkit import Chem
        from rdkit.Chem import AllChem
    except ImportError:
        raise ImportError("the SMILES molecules need rdkit: pip install -e \".[quantum]\" (or pip install rdkit)") \
            from None
    smiles = SMILES_ORGANIC.get(name) or SMILES_LARGE[name]
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    if AllChem.EmbedMolecule(mol, params) != 0:
        raise RuntimeError(f"rdkit could not embed {name!r} ({smiles})")
    AllChem.MMFFOptimizeMolecule(mol, maxIters=2000)
    numbers = np.array([a.GetAtomicNum() for a in mol.GetAtoms()], dtype=np.int64)
    return numbers, np.asarray(mol.GetConformer().GetPositions(), dtype=np.float64)
